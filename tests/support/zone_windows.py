"""The first instant a send window is open, by brute force with Python's zoneinfo: an
independent check of sendonce's `domain::window::next_open` (tests/core/windows.rs).

Reads a JSON list of cases on stdin, each {"now_ms": int, "rules": [{"window": "HH:MM-HH:MM",
"zones": [IANA names]}]}, and prints a JSON list with, for each, the first instant at or after
now_ms (Unix ms) at which every rule's window holds in every one of its zones: now_ms itself,
or the first whole minute after it, scanned minute by minute for 8 days (null: none).
"""
import json
import sys
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

HORIZON_MIN = 8 * 24 * 60


def parse(window):
    a, b = window.split("-")
    ha, ma = a.split(":")
    hb, mb = b.split(":")
    return int(ha) * 60 + int(ma), (int(hb) * 60 + int(mb)) % (24 * 60)


def holds(ms, rules):
    for (start, end), zones in rules:
        for z in zones:
            local = datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone(z)
            m = local.hour * 60 + local.minute
            inside = start <= m < end if start < end else (m >= start or m < end)
            if not inside:
                return False
    return True


def first_open(case):
    rules = [(parse(r["window"]), [ZoneInfo(z) for z in r["zones"]]) for r in case["rules"]]
    now = case["now_ms"]
    if holds(now, rules):
        return now
    t = (now // 60000 + 1) * 60000
    for _ in range(HORIZON_MIN):
        if holds(t, rules):
            return t
        t += 60000
    return None


print(json.dumps([first_open(c) for c in json.load(sys.stdin)]))
