// The mailpit-api npm client (written by others, pinned in package.json) run against a server
// that claims Mailpit's API: tests/fake/fake_mailpit.rs points it at `sendonce fake-provider`.
// Usage: node client.mjs BASE_URL < plan.json
// plan: {"searches": ["to:kim", ...], "wait": "subject:x", "delete": ["ID", ...],
//        "marks": {"read": ["ID", ...], "tag": ["ID", ...], "tags": ["A", "B"], "searches": [...]}}
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
if (plan.marks) {
  // Read flags and tags: everything unread first (reading the summaries above marked them read).
  const m = plan.marks;
  const marks = (out.marks = { searches: {} });
  marks.allUnread = await attempt(() => mailpit.setReadStatus({ Read: false }));
  marks.read = await attempt(() => mailpit.setReadStatus({ IDs: m.read, Read: true }));
  marks.tagged = await attempt(() => mailpit.setTags({ IDs: m.tag, Tags: m.tags }));
  marks.tags = await attempt(() => mailpit.getTags());
  for (const query of m.searches ?? []) {
    marks.searches[query] = await attempt(() => mailpit.searchMessages({ query }));
  }
  marks.list = await attempt(() => mailpit.listMessages());
  marks.renamed = await attempt(() => mailpit.renameTag(m.tags[0], "Renamed"));
  marks.deletedTag = await attempt(() => mailpit.deleteTag(m.tags[1]));
  marks.tagsAfter = await attempt(() => mailpit.getTags());
}
if (plan.delete) {
  out.deleted = await attempt(() => mailpit.deleteMessages({ IDs: plan.delete }));
  out.afterDelete = await attempt(() => mailpit.listMessages());
}
out.deletedAll = await attempt(() => mailpit.deleteMessages());
out.afterDeleteAll = await attempt(() => mailpit.listMessages());
out.infoAfter = await attempt(() => mailpit.getInfo());
console.log(JSON.stringify(out));
