"""An independent SMTP client for tests/fake/fake_smtp.rs: Python's smtplib sends one message to the
fake provider's SMTP listener and prints, as one JSON line, the exact bytes it sent (base64,
after smtplib's dot-stuffing is reversed: the message as built), the replies it got, and the
message as Python's own `email` package parses it.

    fake_smtp_client.py PORT KIND [--cafile PEM] [--user U] (password: FAKE_SMTP_PASSWORD)

KIND: ascii, alternative, latin1 (8-bit, not UTF-8, BODY=8BITMIME), utf8 (SMTPUTF8 address and
subject), or none (AUTH only, then MAIL: prints the replies)."""

import argparse
import base64
import json
import os
import smtplib
import ssl
import sys
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser


def build(kind):
    """(from, to, bytes, MAIL options)."""
    if kind == "ascii":
        m = EmailMessage()
        m["From"] = "Shop <shop@example.org>"
        m["To"] = "kim@example.org"
        m["Subject"] = "Plain ASCII"
        m.set_content("Hello Kim,\n.a line starting with a dot\n..two dots\n.\nbye\n")
        return "shop@example.org", "kim@example.org", m.as_bytes(policy=policy.SMTP), []
    if kind == "alternative":
        m = EmailMessage()
        m["From"] = "shop@example.org"
        m["To"] = "lee@example.org"
        m["Subject"] = "Text and HTML"
        m.set_content("Hi Lee\nSee https://example.org/a?b=1\n")
        m.add_alternative(
            '<html><body><p>Hi <b>Lee</b></p><a href="https://example.org/x">x</a></body></html>\n',
            subtype="html",
        )
        return "shop@example.org", "lee@example.org", m.as_bytes(policy=policy.SMTP), []
    if kind == "latin1":
        body = "Olá, café à la carte\r\nÇa va?\r\n".encode("latin-1")
        raw = (
            b"From: shop@example.org\r\nTo: ana@example.org\r\nSubject: Latin-1 body\r\n"
            b"MIME-Version: 1.0\r\nContent-Type: text/plain; charset=iso-8859-1\r\n"
            b"Content-Transfer-Encoding: 8bit\r\n\r\n" + body
        )
        return "shop@example.org", "ana@example.org", raw, ["BODY=8BITMIME"]
    if kind == "utf8":
        m = EmailMessage(policy=policy.SMTPUTF8)
        m["From"] = "lojá@exemplo.org"
        m["To"] = "joão@exemplo.org"
        m["Subject"] = "Olá João ✓"
        m.set_content("Olá João, tudo bem? ✓\n", cte="8bit")
        return (
            "lojá@exemplo.org",
            "joão@exemplo.org",
            m.as_bytes(policy=policy.SMTPUTF8),
            ["SMTPUTF8", "BODY=8BITMIME"],
        )
    raise SystemExit(f"unknown kind {kind}")


def parsed(raw):
    m = BytesParser(policy=policy.default).parsebytes(raw)
    text = m.get_body(preferencelist=("plain",))
    html = m.get_body(preferencelist=("html",))
    return {
        "subject": str(m["subject"]),
        "from": str(m["from"]),
        "to": str(m["to"]),
        "text": text.get_content() if text is not None else None,
        "html": html.get_content() if html is not None else None,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("kind")
    ap.add_argument("--cafile")
    ap.add_argument("--user")
    args = ap.parse_args()
    out = {"replies": []}
    try:
        s = smtplib.SMTP("127.0.0.1", args.port, timeout=20)
        out["replies"].append(list(s.ehlo("client.example")))
        if args.cafile:
            ctx = ssl.create_default_context(cafile=args.cafile)
            out["replies"].append(list(s.starttls(context=ctx)))
            out["tls"] = s.sock.version()
            s.ehlo("client.example")
        if args.user:
            code, msg = s.docmd(
                "AUTH",
                "PLAIN "
                + base64.b64encode(
                    b"\0" + args.user.encode() + b"\0" + os.environ["FAKE_SMTP_PASSWORD"].encode()
                ).decode(),
            )
            out["replies"].append([code, msg])
        if args.kind == "none":
            out["replies"].append(list(s.docmd("MAIL", "FROM:<a@example.org>")))
        else:
            frm, to, raw, opts = build(args.kind)
            out["raw"] = base64.b64encode(raw).decode()
            out["parsed"] = parsed(raw)
            out["replies"].append(list(s.mail(frm, opts)))
            out["replies"].append(list(s.rcpt(to)))
            out["replies"].append(list(s.data(raw)))
        s.quit()
    except smtplib.SMTPServerDisconnected as e:
        out["disconnected"] = str(e)
    except smtplib.SMTPResponseException as e:
        out["error"] = [e.smtp_code, e.smtp_error]
    for r in out["replies"]:
        if isinstance(r[1], bytes):
            r[1] = r[1].decode("utf-8", "replace")
    if isinstance(out.get("error", [0, ""])[1], bytes):
        out["error"][1] = out["error"][1].decode("utf-8", "replace")
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
