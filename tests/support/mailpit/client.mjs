// The mailpit-api npm client (written by others, pinned in package.json) run against a server
// that claims Mailpit's API: tests/fake/fake_mailpit.rs points it at `sendonce fake-provider`.
// Usage: node client.mjs BASE_URL < plan.json
// plan: {"searches": ["to:kim", ...], "wait": "subject:x", "delete": ["ID", ...]}
// Prints one JSON object: every answer the client returned, or {"error": message} where it threw.
import { MailpitClient } from "mailpit-api";

const base = process.argv[2];
if (!base) {
  console.error("usage: node client.mjs BASE_URL < plan.json");
  process.exit(2);
}
let input = "";
for await (const chunk of process.stdin) input += chunk;
const plan = JSON.parse(input || "{}");
const mailpit = new MailpitClient(base);

// The answer, or the error the client threw (the test asserts on either).
async function attempt(f) {
  try {
    return await f();
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e) };
  }
}

const out = {};
out.info = await attempt(() => mailpit.getInfo());
out.list = await attempt(() => mailpit.listMessages());
out.page = await attempt(() => mailpit.listMessages(1, 1));
out.messages = {};
for (const m of out.list.messages ?? []) {
  out.messages[m.ID] = {
    summary: await attempt(() => mailpit.getMessageSummary(m.ID)),
    source: await attempt(() => mailpit.getMessageSource(m.ID)),
    headers: await attempt(() => mailpit.getMessageHeaders(m.ID)),
    html: await attempt(() => mailpit.renderMessageHTML(m.ID)),
    text: await attempt(() => mailpit.renderMessageText(m.ID)),
  };
}
out.latest = await attempt(() => mailpit.getMessageSummary());
out.missing = await attempt(() => mailpit.getMessageSummary("no-such-id"));
out.searches = {};
for (const query of plan.searches ?? []) {
  out.searches[query] = await attempt(() => mailpit.searchMessages({ query }));
}
if (plan.wait) {
  out.waited = await attempt(() =>
    mailpit.waitForMessage({ query: plan.wait }, { timeout: 3000, interval: 100 }),
  );
}
if (plan.delete) {
  out.deleted = await attempt(() => mailpit.deleteMessages({ IDs: plan.delete }));
  out.afterDelete = await attempt(() => mailpit.listMessages());
}
out.deletedAll = await attempt(() => mailpit.deleteMessages());
out.afterDeleteAll = await attempt(() => mailpit.listMessages());
out.infoAfter = await attempt(() => mailpit.getInfo());
console.log(JSON.stringify(out));
