#!/usr/bin/env python3
"""Drive Debian's chromium (headless) with Playwright for Python, for sendonce's page tests.

Usage:
  browser.py URL [--width 360] [--height 800] [--screenshot BEFORE.png]
             [--fill "label=value" ...] [--check "label text"] [--click "button text"] [--keyboard]
             [--screenshot-after AFTER.png] [--wait MS] [--chromium /usr/bin/chromium]

Loads URL (with --wait MS, then waits that long), optionally saves a full-page screenshot,
types each --fill value into the field with that label (typed key by key, as a person would),
checks the radio button or checkbox whose label contains the given text, then presses the
button with that text: with the mouse, or
with --keyboard by moving the focus there with Tab and pressing Enter (the page must work
without a mouse). Waits for the page the button leads to, optionally screenshots it, and
prints one JSON object on stdout:
  {"status": first page's HTTP status, "title": ..., "text": its visible text,
   "scripts": number of <script> elements, "overflow_x": page wider than the viewport,
   "frames": [{"url": ..., "text": visible text or null}] of the child frames,
   "after": {"status": ..., "title": ..., "text": ...} (only with --click)}
Exit status 0 when the steps ran (whatever the HTTP statuses), 2 on a usage error or a
step that failed (message on stderr).

Never runs `playwright install`: Playwright's browser download does not work here; it drives
the system chromium through `executable_path`.
"""

import argparse
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


def page_state(page, status):
    return {
        "status": status,
        "title": page.title(),
        "text": page.inner_text("body"),
        "scripts": page.locator("script").count(),
        "overflow_x": page.evaluate(
            "document.documentElement.scrollWidth > window.innerWidth"
        ),
        "frames": [frame_state(f) for f in page.frames[1:]],
    }


def frame_state(frame):
    try:
        text = frame.inner_text("body", timeout=2000)
    except Exception:  # a frame that never loaded, or one with no body
        text = None
    return {"url": frame.url, "text": text}


def press_with_keyboard(page, text):
    """Tab through the page until the focused element is the button, then press Enter."""
    for _ in range(50):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "document.activeElement ? [document.activeElement.tagName,"
            " document.activeElement.innerText || ''] : ['', '']"
        )
        if focused[0] == "BUTTON" and text in focused[1]:
            page.keyboard.press("Enter")
            return
    raise RuntimeError("no button %r reachable with Tab" % text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--height", type=int, default=800)
    ap.add_argument("--screenshot")
    ap.add_argument("--fill", action="append", default=[])
    ap.add_argument("--check")
    ap.add_argument("--click")
    ap.add_argument("--keyboard", action="store_true")
    ap.add_argument("--screenshot-after")
    ap.add_argument("--wait", type=int, default=0)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sys.stderr.write("playwright is not installed: run the tests with tests/run.sh\n")
        return 2

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=a.chromium, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": a.width, "height": a.height})
            resp = page.goto(a.url, wait_until="load")
            if a.wait:
                page.wait_for_timeout(a.wait)
            out = page_state(page, resp.status if resp else None)
            if a.screenshot:
                page.screenshot(path=a.screenshot, full_page=True)
            for f in a.fill:
                label, _, value = f.partition("=")
                page.get_by_label(label, exact=True).press_sequentially(value)
            if a.check:
                page.get_by_label(a.check).check()
            if a.click:
                with page.expect_navigation(wait_until="load") as nav:
                    if a.keyboard:
                        press_with_keyboard(page, a.click)
                    else:
                        page.get_by_role("button", name=a.click).click()
                after = nav.value
                out["after"] = page_state(page, after.status if after else None)
                if a.screenshot_after:
                    page.screenshot(path=a.screenshot_after, full_page=True)
        except Exception as e:  # one line for the test's failure message
            sys.stderr.write("browser.py: %s: %s\n" % (type(e).__name__, e))
            return 2
        finally:
            browser.close()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
