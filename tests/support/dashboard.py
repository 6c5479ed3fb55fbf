#!/usr/bin/env python3
"""Drive the sendonce dashboard in Debian's chromium (headless, Playwright for Python) through a
scenario: one browser context (its cookies persist from step to step), steps run in order.

Usage: dashboard.py < SCENARIO.json

SCENARIO: {"base": "http://127.0.0.1:PORT", "width": 1024, "height": 800,
           "out": "DIR for screenshots", "steps": [STEP, ...]}

Each STEP is an object with one action key (plus options):
  {"goto": "/admin/lists"}                  load a path (its HTTP status is kept; see expect_status)
  {"login": ["name", "password"]}           open /admin/login, type both, submit with the keyboard
  {"fill": {"Label": "value", ...}}         type into the fields with these labels (exact)
  {"select": {"Label": "option label"}}     choose an option of a <select>
  {"check": "label text"}                   check a checkbox or radio button
  {"upload": {"Label": "/path/to/file"}}    set a file input
  {"click": "button text"}                  press the button (exact accessible name) and wait for
                                            the page it leads to; "keyboard": true reaches it
                                            with Tab and presses Enter instead of the mouse
  {"follow": "link text"}                   click the link (exact name) and wait for the page
  {"expect_text": "..."}                    the page's visible text contains it
  {"expect_no_text": "..."}                 ... does not contain it
  {"expect_status": 200}                    the last navigation's HTTP status
  {"wait_text": "...", "timeout": 30000}    reload every 500 ms (or let the page's script update
                                            it) until the text appears
  {"screenshot": "name"}                    full-page PNG OUT/name.png
  {"no_overflow": true}                     the page is not wider than the viewport
  {"record": "key"}                         keep the page's URL and text under "key" in the output
  {"eval": "js expression", "record": "k"}  (tests only) evaluate in the page, keep the value

Prints {"records": {...}, "statuses": [...], "console_errors": [...]} on success (exit 0). On a
failed step: exit 2, and stderr names the step (index and JSON), the page's URL and the start of
its text. Never runs `playwright install`: it drives /usr/bin/chromium.
"""

import json
import sys

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def press_with_keyboard(page, text):
    """Tab through the page until the focused element is the button, then press Enter."""
    page.evaluate("document.activeElement && document.activeElement.blur()")
    for _ in range(200):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "document.activeElement ? [document.activeElement.tagName,"
            " (document.activeElement.innerText || document.activeElement.value || '').trim()]"
            " : ['', '']"
        )
        if focused[0] in ("BUTTON", "INPUT") and focused[1] == text:
            page.keyboard.press("Enter")
            return
    raise RuntimeError("no button %r reachable with Tab" % text)


class Runner:
    def __init__(self, page, sc):
        self.page = page
        self.base = sc["base"].rstrip("/")
        self.out = sc.get("out", ".")
        self.records = {}
        self.statuses = []
        self.last_status = None

    def navigated(self, resp):
        self.last_status = resp.status if resp else None
        self.statuses.append(self.last_status)

    def text(self):
        return self.page.inner_text("body")

    def submit(self, step, action):
        with self.page.expect_navigation(wait_until="load") as nav:
            action()
        self.navigated(nav.value)

    def run(self, step):
        p = self.page
        if "goto" in step:
            self.navigated(p.goto(self.base + step["goto"], wait_until="load"))
        elif "login" in step:
            name, password = step["login"]
            self.navigated(p.goto(self.base + "/admin/login", wait_until="load"))
            p.get_by_label("Name", exact=True).press_sequentially(name)
            p.get_by_label("Password", exact=True).press_sequentially(password)
            self.submit(step, lambda: press_with_keyboard(p, "Log in"))
        elif "fill" in step:
            for label, value in step["fill"].items():
                field = p.get_by_label(label, exact=True)
                field.fill("")
                if len(value) > 200 or "\n" in value:
                    field.fill(value)
                else:
                    field.press_sequentially(value)
        elif "select" in step:
            for label, option in step["select"].items():
                p.get_by_label(label, exact=True).select_option(label=option)
        elif "check" in step:
            p.get_by_label(step["check"]).check()
        elif "upload" in step:
            for label, path in step["upload"].items():
                p.get_by_label(label, exact=True).set_input_files(path)
        elif "click" in step:
            name = step["click"]
            if step.get("keyboard"):
                self.submit(step, lambda: press_with_keyboard(p, name))
            else:
                self.submit(step, lambda: p.get_by_role("button", name=name, exact=True).click())
        elif "follow" in step:
            self.submit(step, lambda: p.get_by_role("link", name=step["follow"], exact=True).first.click())
        elif "expect_text" in step:
            if step["expect_text"] not in self.text():
                raise AssertionError("text %r not on the page" % step["expect_text"])
        elif "expect_no_text" in step:
            if step["expect_no_text"] in self.text():
                raise AssertionError("text %r is on the page" % step["expect_no_text"])
        elif "expect_status" in step:
            if self.last_status != step["expect_status"]:
                raise AssertionError("status %r, wanted %r" % (self.last_status, step["expect_status"]))
        elif "wait_text" in step:
            self.wait_text(step["wait_text"], step.get("timeout", 30000))
        elif "screenshot" in step:
            p.screenshot(path="%s/%s.png" % (self.out, step["screenshot"]), full_page=True)
        elif "no_overflow" in step:
            wide = p.evaluate("document.documentElement.scrollWidth > window.innerWidth")
            if wide:
                raise AssertionError("the page is wider than the viewport")
        elif "eval" in step:
            self.records[step["record"]] = p.evaluate(step["eval"])
        elif "record" in step:
            self.records[step["record"]] = {"url": p.url, "text": self.text()}
        else:
            raise ValueError("unknown step")

    def wait_text(self, text, timeout):
        waited = 0
        while text not in self.text():
            if waited >= timeout:
                raise AssertionError("text %r did not appear within %d ms" % (text, timeout))
            self.page.wait_for_timeout(500)
            waited += 500
            if waited % 2000 == 0:
                self.navigated(self.page.reload(wait_until="load"))


def main():
    sc = json.load(sys.stdin)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sys.stderr.write("playwright is not installed: run the tests with tests/run.sh\n")
        return 2
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=sc.get("chromium", "/usr/bin/chromium"), headless=True, args=ARGS
        )
        errors = []
        try:
            ctx = browser.new_context(
                viewport={"width": sc.get("width", 1024), "height": sc.get("height", 800)}
            )
            page = ctx.new_page()
            page.set_default_timeout(sc.get("timeout", 15000))
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            r = Runner(page, sc)
            for i, step in enumerate(sc["steps"]):
                try:
                    r.run(step)
                except Exception as e:
                    try:
                        where, text = page.url, page.inner_text("body")[:1500]
                    except Exception:
                        where, text = page.url, "(no text)"
                    sys.stderr.write(
                        "dashboard.py: step %d %s failed: %s: %s\n  at %s\n  page text: %s\n"
                        % (i, json.dumps(step), type(e).__name__, e, where, text)
                    )
                    return 2
        finally:
            browser.close()
    print(json.dumps({"records": r.records, "statuses": r.statuses, "console_errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
