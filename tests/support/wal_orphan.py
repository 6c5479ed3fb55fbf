"""A SQLite behaviour the crash suite met, shown on its own (docs/guarantees.md, "A commit cut
by SIGKILL"): a writer killed inside its commit, after its WAL frames were written and before
the shared wal-index was updated, leaves a transaction that the connections still open do not
see, and that becomes committed when the WAL is recovered after every connection died without
closing, as long as nobody wrote in between (the next writer's frames replace it).

Usage: python3 tests/support/wal_orphan.py [KILLS] [SEED] -> one line per kill where a fresh
reader, while an idle process still held the file open, saw fewer rows than a reader after that
process was killed too; then the count. Uses Python's sqlite3 (not sendonce), in /tmp.
"""

import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

WRITER = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=10)
c.execute("PRAGMA synchronous=FULL")
while True:
    c.execute("BEGIN IMMEDIATE")
    c.executemany("INSERT INTO t(pad) VALUES (?)", [("x" * 500,)] * 20)
    c.execute("COMMIT")
"""

IDLE = """
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1])
c.execute("SELECT count(*) FROM t").fetchone()
print("ready", flush=True)
time.sleep(600)
"""


def count(db):
    r = sqlite3.connect(db)
    n = r.execute("SELECT count(*) FROM t").fetchone()[0]
    r.close()
    return n


def main():
    kills = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    random.seed(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    db = os.path.join(tempfile.mkdtemp(prefix="wal-orphan-"), "t.db")
    c = sqlite3.connect(db)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, pad TEXT)")
    c.commit()
    c.close()
    late = 0
    for i in range(kills):
        idle = subprocess.Popen([sys.executable, "-c", IDLE, db], stdout=subprocess.PIPE)
        idle.stdout.readline()
        writer = subprocess.Popen([sys.executable, "-c", WRITER, db])
        time.sleep(random.uniform(0.05, 0.15))
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        seen = count(db)  # the idle process keeps the wal-index: no recovery
        os.kill(idle.pid, signal.SIGKILL)
        idle.wait()
        after = count(db)  # the first opener recovers the WAL
        if after != seen:
            late += 1
            print(f"kill {i}: {seen} rows seen after the kill, {after} after recovery")
    print(f"{kills} kills, {late} commits visible only after recovery")


main()
