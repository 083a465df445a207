"""Signed webhook fixtures, built the way each provider signs, with keys made here.

* Resend: Svix's own library signs (``svix.webhooks.Webhook``).
* SES: an SNS-style signing certificate and RSA key made with ``cryptography``,
  served over HTTPS (a trustme CA) by :class:`CertServer`, which also answers the
  SubscribeURL of a subscription confirmation and records that it was called.
* SendGrid: an ECDSA P-256 key pair; the public half is given to mailout as SendGrid
  shows it (base64 DER).
* Mailgun: HMAC-SHA256 of timestamp + token with a signing key.
* Postmark and Brevo: basic auth / bearer credentials.

``WebhookServer`` runs the ASGI app under uvicorn on a free loopback port in a
thread; ``post`` sends a real HTTP request with urllib and returns (status, JSON).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import ssl
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID
from svix.webhooks import Webhook

from bench.common import free_port
from bench.support.tls import TestCerts

RESEND_SECRET = "whsec_" + base64.b64encode(b"mailout-test-signing-secret-0001").decode()
POSTMARK_AUTH = "postmark:hook-password-1"
BREVO_AUTH = "brevo:hook-password-2"
BREVO_TOKEN = "brevo-bearer-token-0123456789"
MAILGUN_KEY = "key-mailgun-signing-0123456789abcdef"
SES_TOPIC = "arn:aws:sns:eu-west-1:123456789012:ses-events"


def post(url: str, body: bytes | str, headers: Mapping[str, str] | None = None,
         timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return exc.code, {"raw": raw.decode("utf-8", "replace")}


def basic(credentials: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}


# -- Resend (Svix) ---------------------------------------------------------------------

def resend_request(doc: dict[str, Any], *, msg_id: str | None = None,
                   at: datetime | None = None, secret: str = RESEND_SECRET
                   ) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(doc)
    msg_id = msg_id or f"msg_{uuid.uuid4().hex[:24]}"
    at = at or datetime.now(UTC)
    signature = Webhook(secret).sign(msg_id, at, body)
    return body.encode(), {"svix-id": msg_id, "svix-timestamp": str(int(at.timestamp())),
                           "svix-signature": signature}


def resend_event(kind: str, to: str, email_id: str, **data: Any) -> dict[str, Any]:
    return {"type": kind, "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "data": {"email_id": email_id, "from": "Shop <noreply@shop.example>",
                     "to": [to], "subject": "Your order", "created_at": "2025-01-01T00:00:00Z",
                     **data}}


# -- SendGrid (ECDSA) ----------------------------------------------------------------------

class SendgridKeys:
    def __init__(self) -> None:
        self.private = ec.generate_private_key(ec.SECP256R1())
        der = self.private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        self.public_b64 = base64.b64encode(der).decode()

    def sign(self, body: bytes, at: float | None = None) -> dict[str, str]:
        stamp = str(int(at if at is not None else time.time()))
        sig = self.private.sign(stamp.encode() + body, ec.ECDSA(hashes.SHA256()))
        return {"X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(sig).decode(),
                "X-Twilio-Email-Event-Webhook-Timestamp": stamp}


# -- Mailgun (HMAC) --------------------------------------------------------------------------

def mailgun_body(event_data: dict[str, Any], *, key: str = MAILGUN_KEY,
                 at: float | None = None, token: str | None = None) -> bytes:
    stamp = str(int(at if at is not None else time.time()))
    token = token or secrets.token_hex(25)
    sig = hmac.new(key.encode(), (stamp + token).encode(), hashlib.sha256).hexdigest()
    return json.dumps({"signature": {"timestamp": stamp, "token": token, "signature": sig},
                       "event-data": event_data}).encode()


# -- SNS (RSA certificate served over HTTPS) -------------------------------------------------

class SnsSigner:
    """A signing key and a self-made certificate for it, as SNS publishes its own."""

    def __init__(self, valid_from: datetime | None = None,
                 common_name: str = "sns.amazonaws.com") -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        start = valid_from or datetime.now(UTC) - timedelta(days=1)
        self.cert_pem = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(start + timedelta(days=30))
            .sign(self.key, hashes.SHA256())
        ).public_bytes(serialization.Encoding.PEM)

    def sign(self, doc: dict[str, Any], version: str = "2") -> dict[str, Any]:
        from mailout.webhooks.ses import string_to_sign

        algorithm = hashes.SHA256() if version == "2" else hashes.SHA1()
        signature = self.key.sign(string_to_sign(doc), padding.PKCS1v15(), algorithm)
        return {**doc, "SignatureVersion": version,
                "Signature": base64.b64encode(signature).decode()}


class CertServer:
    """HTTPS on loopback serving ``/cert.pem`` and counting ``/confirm`` calls."""

    def __init__(self, certs: TestCerts, signer: SnsSigner) -> None:
        self.confirmations = 0
        self.cert_fetches = 0
        self.missing_fetches = 0  # GETs of /missing.pem, answered 404
        self.signer = signer  # whose certificate /cert.pem serves (a test may swap it)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/cert.pem"):
                    owner.cert_fetches += 1
                    body = owner.signer.cert_pem
                elif self.path.startswith("/missing.pem"):
                    owner.missing_fetches += 1
                    self.send_error(404)
                    return
                elif self.path.startswith("/confirm"):
                    owner.confirmations += 1
                    body = b"<ConfirmSubscriptionResponse/>"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = certs.server_context
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.origin = f"https://localhost:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def sns_notification(signer: SnsSigner, origin: str, message: dict[str, Any], *,
                     topic: str = SES_TOPIC, at: datetime | None = None,
                     message_id: str | None = None, version: str = "2") -> dict[str, Any]:
    stamp = (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    doc = {"Type": "Notification", "MessageId": message_id or str(uuid.uuid4()),
           "TopicArn": topic, "Message": json.dumps(message), "Timestamp": stamp,
           "SigningCertURL": f"{origin}/cert.pem",
           "UnsubscribeURL": f"{origin}/unsubscribe"}
    return signer.sign(doc, version)


def sns_subscription(signer: SnsSigner, origin: str, *, topic: str = SES_TOPIC
                     ) -> dict[str, Any]:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    doc = {"Type": "SubscriptionConfirmation", "MessageId": str(uuid.uuid4()),
           "Token": secrets.token_hex(32), "TopicArn": topic,
           "Message": f"You have chosen to subscribe to the topic {topic}.",
           "SubscribeURL": f"{origin}/confirm?Action=ConfirmSubscription&Token=x",
           "Timestamp": stamp, "SigningCertURL": f"{origin}/cert.pem"}
    return signer.sign(doc)


def ses_bounce(recipient: str, ses_id: str, *, permanent: bool = True,
               message_id: str | None = None) -> dict[str, Any]:
    return {
        "notificationType": "Bounce",
        "bounce": {"bounceType": "Permanent" if permanent else "Transient",
                   "bounceSubType": "General" if permanent else "MailboxFull",
                   "bouncedRecipients": [{"emailAddress": recipient, "action": "failed",
                                          "status": "5.1.1" if permanent else "4.2.2",
                                          "diagnosticCode": "smtp; 550 5.1.1 user unknown"
                                          if permanent else "smtp; 452 4.2.2 full"}],
                   "timestamp": datetime.now(UTC).isoformat(),
                   "feedbackId": f"0100-{uuid.uuid4().hex}-000000"},
        "mail": {"timestamp": datetime.now(UTC).isoformat(), "messageId": ses_id,
                 "source": "noreply@shop.example", "destination": [recipient],
                 "commonHeaders": {"messageId": message_id} if message_id else {}},
    }


# -- the app under uvicorn ---------------------------------------------------------------------

class WebhookServer:
    """An ASGI app served by uvicorn on 127.0.0.1 in a background thread."""

    def __init__(self, app: Any, host: str = "127.0.0.1") -> None:
        self.port = free_port()
        config = uvicorn.Config(app, host=host, port=self.port, log_level="warning",
                                access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> WebhookServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the webhook server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@contextmanager
def serving(app: Any, host: str = "127.0.0.1") -> Iterator[WebhookServer]:
    server = WebhookServer(app, host).start()
    try:
        yield server
    finally:
        server.stop()


def client_context(certs: TestCerts) -> ssl.SSLContext:
    return certs.client_context()


def get(url: str, headers: Mapping[str, str] | None = None,
        timeout: float = 10.0) -> tuple[int, bytes]:
    """GET ``url``: the status and the body, for any status."""
    req = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
