"""A webhook receiver for the events-out tests (tests/http/events_out.rs, tests/crash/events.rs):
every request is verified with the `standardwebhooks` package (the reference implementation
of the Standard Webhooks spec, not our code) against the secrets given; each verified delivery
is appended to a JSON-lines log with its webhook-id and body. To make the sender work for it,
the receiver fails a share of the calls (HTTP 503) and, for another share, records the event and
then closes the connection without answering (the sender cannot know it arrived).

Usage: hook_receiver.py LOG --secret whsec_... [--secret ...] [--fail 0.3] [--drop 0.1]
       [--seed N] [--port P]
Prints `listening on PORT` once bound. A request whose signature does not verify is logged
with "verified": false and answered 400.
"""

import argparse
import http.server
import json
import random
import socketserver
import sys
import threading

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--secret", action="append", required=True)
    ap.add_argument("--fail", type=float, default=0.0)
    ap.add_argument("--drop", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    hooks = [Webhook(s) for s in args.secret]
    rng = random.Random(args.seed)
    lock = threading.Lock()
    log = open(args.log, "a", buffering=1)

    def verified(body, headers):
        """The indexes of the secrets whose signature the request carries (None: none)."""
        ok = []
        for i, h in enumerate(hooks):
            try:
                h.verify(body, headers)
                ok.append(i)
            except WebhookVerificationError:
                continue
        return ok or None

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            n = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(n)
            headers = {k.lower(): v for k, v in self.headers.items()}
            which = verified(body, headers)
            with lock:
                roll = rng.random()
            if which is None:
                entry = {"id": headers.get("webhook-id"), "verified": False}
                log.write(json.dumps(entry) + "\n")
                self.answer(400)
                return
            if roll < args.fail:
                self.answer(503)
                return
            entry = {
                "id": headers.get("webhook-id"),
                "verified": True,
                "secrets": which,
                "signatures": len(headers.get("webhook-signature", "").split()),
                "path": self.path,
                "body": json.loads(body),
            }
            log.write(json.dumps(entry) + "\n")
            if roll < args.fail + args.drop:
                # Received and kept, but the sender never hears it.
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self.answer(200)

        def answer(self, status):
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    srv = Server(("127.0.0.1", args.port), Handler)
    print(f"listening on {srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
