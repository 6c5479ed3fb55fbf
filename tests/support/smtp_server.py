#!/usr/bin/env python3
"""A real SMTP server (aiosmtpd) for sendonce's tests: it saves each message's raw bytes.

Usage: smtp_server.py DIR [--auth-user USER] [--tls-cert PEM --tls-key PEM] [--no-fsync]

Binds 127.0.0.1 on a free port and prints "READY <port>" on stdout once it accepts
connections. Each accepted message is written to DIR/<n>.eml (the bytes exactly as received
after the DATA command, dot-unstuffed) and DIR/<n>.json (envelope sender and recipients),
each atomically (temp file + rename), fsynced unless --no-fsync (for tests that send thousands
of messages and never kill the server: two fsyncs per message block the one event loop for
milliseconds each on a real disk). Recipients whose local part starts with "bounce" get
"550 5.1.1", with "busy" get "451 4.3.0". With --auth-user, AUTH PLAIN/LOGIN is required and
the password is read from the environment variable SMTP_TEST_PASSWORD (never argv). With
--tls-cert/--tls-key, STARTTLS is offered and required. Stops on SIGTERM or when stdin closes.
"""

import argparse
import asyncio
import json
import os
import signal
import socket
import ssl
import sys

try:
    from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword
except ImportError:
    sys.stderr.write(
        "aiosmtpd is not installed: run the tests with `tests/run.sh`, which installs it into a venv\n"
    )
    sys.exit(3)


class SaveHandler:
    def __init__(self, directory, fsync=True):
        self.directory = directory
        self.fsync = fsync
        self.count = 0

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        local = address.split("@", 1)[0].lower()
        if local.startswith("bounce"):
            return "550 5.1.1 <%s>: Recipient address rejected: User unknown" % address
        if local.startswith("busy"):
            return "451 4.3.0 Mailbox temporarily unavailable, try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        n = "%06d" % self.count
        raw = envelope.original_content or envelope.content
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogateescape")
        meta = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": list(envelope.rcpt_tos),
            "tls": session.ssl is not None,
            "auth": session.authenticated,
        }
        for name, data in ((n + ".eml", raw), (n + ".json", json.dumps(meta).encode())):
            tmp = os.path.join(self.directory, "." + name + ".tmp")
            with open(tmp, "wb") as f:
                f.write(data)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.rename(tmp, os.path.join(self.directory, name))
        return "250 2.0.0 OK queued as %s" % n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--auth-user")
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    p.add_argument("--no-fsync", action="store_true")
    args = p.parse_args()
    os.makedirs(args.dir, exist_ok=True)

    kwargs = {"hostname": "sendonce-test.local"}
    if args.tls_cert:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        kwargs["tls_context"] = ctx
        kwargs["require_starttls"] = True
    if args.auth_user:
        user = args.auth_user.encode()
        password = os.environ.get("SMTP_TEST_PASSWORD", "").encode()

        def authenticator(server, session, envelope, mechanism, auth_data):
            ok = (
                isinstance(auth_data, LoginPassword)
                and auth_data.login == user
                and auth_data.password == password
            )
            # handled=False: aiosmtpd itself answers 535 on failure.
            return AuthResult(success=ok, handled=False)

        kwargs["authenticator"] = authenticator
        kwargs["auth_required"] = True
        kwargs["auth_require_tls"] = bool(args.tls_cert)

    handler = SaveHandler(args.dir, fsync=not args.no_fsync)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = loop.run_until_complete(
        loop.create_server(lambda: SMTP(handler, loop=loop, **kwargs), sock=sock)
    )
    port = sock.getsockname()[1]
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, lambda: stop.done() or stop.set_result(None))
    # The test keeps our stdin open; when it goes away (even killed), so do we.
    try:
        loop.add_reader(
            sys.stdin.fileno(),
            lambda: (not sys.stdin.buffer.read1(4096)) and (stop.done() or stop.set_result(None)),
        )
    except (OSError, ValueError):
        pass  # stdin is not a pipe (a terminal or /dev/null): rely on SIGTERM

    sys.stdout.write("READY %d\n" % port)
    sys.stdout.flush()
    loop.run_until_complete(stop)
    server.close()
    loop.run_until_complete(server.wait_closed())


if __name__ == "__main__":
    main()
