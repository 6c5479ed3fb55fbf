"""What flufl.bounce (GNU Mailman's bounce detector, which we did not write) reads in each
bounce of a directory, for tests/core/dsn.rs to compare with sendonce's own DSN parser.

Usage: dsn_corpus.py DIR -> one JSON object on stdout: {file name: {"failed": [...],
"delayed": [...]}} with the addresses its RFC 3464 detector reports, lower-cased and sorted.
"""

import email
import email.policy
import json
import os
import sys

from flufl.bounce._detectors.dsn import DSN


def read(path):
    with open(path, "rb") as f:
        msg = email.message_from_binary_file(f, policy=email.policy.compat32)
    delayed, failed = DSN().process(msg)
    norm = lambda s: sorted({a.decode("ascii").lower() for a in s})
    return {"failed": norm(failed), "delayed": norm(delayed)}


def main():
    root = sys.argv[1]
    out = {name: read(os.path.join(root, name)) for name in sorted(os.listdir(root))
           if name.endswith(".txt")}
    json.dump(out, sys.stdout)


main()
