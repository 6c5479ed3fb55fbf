#!/usr/bin/env python3
"""Send through the fake provider with each provider's official SDK, for sendonce's tests.

Usage:
  cloud_sdks.py BASE_URL AWS_KEY_ID AWS_SECRET

BASE_URL is the fake's http://127.0.0.1:PORT. The SDKs (pinned in tests/requirements.txt):
boto3's `sesv2` client, `sendgrid`, Mailgun's `mailgun` and Brevo's `brevo-python`. Each sends
one message with a file (bytes that are not UTF-8) and a job id, then one request its provider
would refuse, caught as that SDK's own error type. Prints one JSON object on stdout:
  {"ses": {"id", "raw_id", "tenant_id" (sent under /t/sdk-ses), "wrong_key": {"status", "code"}, "bad": {"status", "code"}},
   "sendgrid": {"status", "id", "bad": {"status", "field"}},
   "mailgun": {"status", "id", "message", "bad": {"status", "message"}},
   "brevo": {"id", "replay_id", "bad": {"status", "code"}},
   "file": base64 of the file every message carried}
Exit status 0 when every step ran as expected by the SDK (an unexpected success or error
exits 1 with the reason on stderr).
"""

import base64
import json
import sys

FILE = bytes(range(256)) + b"\r\nend\n"
TEXT = "Your receipt is attached.\n"
HTML = "<p>Your <b>receipt</b> is attached.</p>"


def fail(why):
    sys.stderr.write(f"cloud_sdks.py: {why}\n")
    sys.exit(1)


def ses(base, key_id, secret):
    import boto3
    import botocore.exceptions

    def client(sec):
        return boto3.client(
            "sesv2",
            endpoint_url=base,
            region_name="eu-west-1",
            aws_access_key_id=key_id,
            aws_secret_access_key=sec,
        )

    def simple(to):
        return {
            "FromEmailAddress": "Shop <shop@example.org>",
            "Destination": {"ToAddresses": [to]},
            "Content": {
                "Simple": {
                    "Subject": {"Data": "Receipt (SES)"},
                    "Body": {"Text": {"Data": TEXT}, "Html": {"Data": HTML}},
                    "Headers": [{"Name": "X-Sendonce-Job", "Value": "job-ses"}],
                    "Attachments": [
                        {
                            "RawContent": FILE,
                            "FileName": "receipt.bin",
                            "ContentType": "application/octet-stream",
                        }
                    ],
                }
            },
            "EmailTags": [{"Name": "campaign", "Value": "receipts"}],
        }

    out = {"id": client(secret).send_email(**simple("kim@example.org"))["MessageId"]}
    raw = (
        b"From: Shop <shop@example.org>\r\nTo: Ann <ann@example.org>\r\n"
        b"Subject: Raw receipt (SES)\r\nX-Sendonce-Job: job-ses-raw\r\n\r\nRaw body.\r\n"
    )
    out["raw_id"] = client(secret).send_email(Content={"Raw": {"Data": raw}})["MessageId"]
    # Through a tenant's prefix: the signature covers the path as sent, prefix included.
    tenant = boto3.client(
        "sesv2",
        endpoint_url=base + "/t/sdk-ses",
        region_name="eu-west-1",
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
    )
    out["tenant_id"] = tenant.send_email(**simple("lee@example.org"))["MessageId"]
    for name, sec, to in [
        ("wrong_key", secret + "x", "kim@example.org"),
        ("bad", secret, "not-an-address"),
    ]:
        try:
            client(sec).send_email(**simple(to))
            fail(f"SES {name}: accepted")
        except botocore.exceptions.ClientError as e:
            out[name] = {
                "status": e.response["ResponseMetadata"]["HTTPStatusCode"],
                "code": e.response["Error"]["Code"],
            }
    return out


def sendgrid(base):
    from python_http_client.exceptions import HTTPError
    from sendgrid import SendGridAPIClient
    from sendgrid.helpers.mail import (
        Attachment,
        CustomArg,
        Disposition,
        FileContent,
        FileName,
        FileType,
        Mail,
    )

    sg = SendGridAPIClient(api_key="SG.offline-test-key", host=base)
    m = Mail(
        from_email="shop@example.org",
        to_emails="kim@example.org",
        subject="Receipt (SendGrid)",
        plain_text_content=TEXT,
        html_content=HTML,
    )
    m.attachment = Attachment(
        FileContent(base64.b64encode(FILE).decode()),
        FileName("receipt.bin"),
        FileType("application/octet-stream"),
        Disposition("attachment"),
    )
    m.custom_arg = CustomArg("sendonce_job", "job-sendgrid")
    r = sg.send(m)
    out = {"status": r.status_code, "id": r.headers.get("X-Message-Id"), "body": r.body.decode()}
    try:
        sg.send(Mail(from_email="shop@example.org", to_emails="kim@example.org", subject="x"))
        fail("SendGrid without content: accepted")
    except HTTPError as e:
        out["bad"] = {"status": e.status_code, "field": json.loads(e.body)["errors"][0]["field"]}
    return out


def mailgun(base):
    from mailgun.client import Client

    mg = Client(auth=("api", "key-offline-test"), api_url=base)
    r = mg.messages.create(
        domain="mg.example.org",
        data={
            "from": "Shop <shop@example.org>",
            "to": ["kim@example.org"],
            "subject": "Receipt (Mailgun)",
            "text": TEXT,
            "html": HTML,
            "h:X-Sendonce-Job": "job-mailgun",
            "v:order": "1234",
        },
        files=[("attachment", ("receipt.bin", FILE))],
    )
    body = r.json()
    out = {"status": r.status_code, "id": body.get("id"), "message": body.get("message")}
    bad = mg.messages.create(
        domain="mg.example.org",
        data={"from": "shop@example.org", "to": "kim@example.org", "subject": "x"},
    )
    out["bad"] = {"status": bad.status_code, "message": bad.json().get("message")}
    return out


def brevo(base):
    from brevo import Brevo
    from brevo.core.api_error import ApiError

    bv = Brevo(api_key="xkeysib-offline-test", base_url=base + "/v3")

    def send():
        return bv.transactional_emails.send_transac_email(
            sender={"email": "shop@example.org", "name": "Shop"},
            to=[{"email": "kim@example.org", "name": "Kim"}],
            subject="Receipt (Brevo)",
            text_content=TEXT,
            html_content=HTML,
            headers={"X-Sendonce-Job": "job-brevo", "idempotencyKey": "order-1234"},
            attachment=[{"content": base64.b64encode(FILE).decode(), "name": "receipt.bin"}],
        )

    out = {"id": send().message_id, "replay_id": send().message_id}
    try:
        bv.transactional_emails.send_transac_email(
            to=[{"email": "kim@example.org"}], subject="x", text_content="x"
        )
        fail("Brevo without a sender: accepted")
    except ApiError as e:
        out["bad"] = {"status": e.status_code, "code": e.body.get("code")}
    return out


def main():
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        sys.exit(2)
    base, key_id, secret = sys.argv[1:]
    print(
        json.dumps(
            {
                "ses": ses(base, key_id, secret),
                "sendgrid": sendgrid(base),
                "mailgun": mailgun(base),
                "brevo": brevo(base),
                "file": base64.b64encode(FILE).decode(),
            }
        )
    )


if __name__ == "__main__":
    main()
