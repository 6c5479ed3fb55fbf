"""Read one RFC 5322 message (path in argv[1]) with Python's own `email` package (policy
default) and print its HTML body and its files as JSON: the independent reading of what
sendonce's SMTP builder wrote (tests/http/templates.rs)."""
import base64
import email
import email.policy
import json
import sys

with open(sys.argv[1], "rb") as f:
    msg = email.message_from_binary_file(f, policy=email.policy.default)
html = msg.get_body(preferencelist=("html",))
files = []
for part in msg.walk():
    if part.is_multipart() or part.get_filename() is None:
        continue
    cid = part.get("Content-ID")
    files.append({
        "filename": part.get_filename(),
        "content_type": part.get_content_type(),
        "content_id": cid.strip("<>") if cid else None,
        "disposition": part.get_content_disposition(),
        "content": base64.b64encode(part.get_payload(decode=True)).decode(),
    })
print(json.dumps({"html": html.get_content() if html else None, "files": files,
                  "defects": [str(d) for p in msg.walk() for d in p.defects]}))
