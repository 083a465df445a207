"""Per-provider request builders for the webhook tests: a signed hard bounce, the same
event signed afresh (a genuine redelivery), a forged copy and a stale copy."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support import webhooks as w

Built = tuple[bytes, dict[str, str]]


@dataclass
class Case:
    """How to talk to one provider's endpoint about one event."""

    provider: str
    bounce: Callable[[str, str, str], Built]  # (recipient, provider id, message id) -> request
    redeliver: Callable[[Built], Built]  # the same event, freshly signed
    forge: Callable[[Built], Built]  # a tampered or wrongly signed copy
    stale: Callable[[str, str, str], Built] | None  # signed long ago; None: nothing signed
    replay_refused: bool  # an exact copy is refused (signed nonce)
    unsigned: Callable[[Built], Built] = lambda b: (b[0], {})  # credentials taken away


def _tamper(body: bytes) -> bytes:
    return body.replace(b"@", b"@x", 1)


# -- Resend -------------------------------------------------------------------------------

def _resend_bounce(rcpt: str, pid: str, mid: str, at: datetime | None = None,
                   msg_id: str | None = None) -> Built:
    doc = w.resend_event("email.bounced", rcpt, pid, bounce={
        "type": "Permanent", "subType": "General", "message": "550 5.1.1 user unknown"})
    return w.resend_request(doc, at=at, msg_id=msg_id)


def _resend_redeliver(built: Built) -> Built:
    body, headers = built
    return w.resend_request(json.loads(body), msg_id=headers["svix-id"],
                            at=datetime.now(UTC) + timedelta(seconds=1))


def _resend_forge(built: Built) -> Built:
    return _tamper(built[0]), built[1]


RESEND = Case("resend", _resend_bounce, _resend_redeliver, _resend_forge,
              lambda r, p, m: _resend_bounce(r, p, m, at=datetime.now(UTC) - timedelta(hours=1)),
              replay_refused=True)


# -- Postmark -------------------------------------------------------------------------------

def _postmark_bounce(rcpt: str, pid: str, mid: str) -> Built:
    doc = {"RecordType": "Bounce", "ID": int(time.time() * 1000) % 10**12,
           "Type": "HardBounce", "TypeCode": 1, "MessageID": pid, "Email": rcpt,
           "BouncedAt": datetime.now(UTC).isoformat(), "Description": "The server was "
           "unable to deliver your message (ex: unknown user, mailbox not found).",
           "Details": "smtp;550 5.1.1 user unknown", "MessageStream": "outbound"}
    return json.dumps(doc).encode(), w.basic(w.POSTMARK_AUTH)


POSTMARK = Case("postmark", _postmark_bounce, lambda b: b,
                lambda b: (b[0], w.basic("postmark:wrong-password")), None,
                replay_refused=False)


# -- SendGrid ---------------------------------------------------------------------------------

def sendgrid_case(keys: w.SendgridKeys) -> Case:
    def bounce(rcpt: str, pid: str, mid: str, at: float | None = None) -> Built:
        body = json.dumps([{"email": rcpt, "timestamp": int(time.time()), "event": "bounce",
                            "type": "bounce", "status": "5.1.1",
                            "reason": "550 5.1.1 The email account does not exist",
                            "sg_event_id": uuid.uuid4().hex, "smtp-id": mid,
                            "sg_message_id": f"{pid}.filterdrecv-5bd6f7c8-abcde-1-0"}]).encode()
        return body, keys.sign(body, at)

    def redeliver(built: Built) -> Built:
        return built[0], keys.sign(built[0], time.time() + 1)

    def forge(built: Built) -> Built:
        return _tamper(built[0]), built[1]

    return Case("sendgrid", bounce, redeliver, forge,
                lambda r, p, m: bounce(r, p, m, at=time.time() - 3600), replay_refused=True)


# -- Mailgun ------------------------------------------------------------------------------------

def _mailgun_data(rcpt: str, mid: str) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex[:22], "event": "failed", "severity": "permanent",
            "reason": "bounce", "recipient": rcpt, "timestamp": time.time(),
            "log-level": "error", "message": {"headers": {"message-id": mid.strip("<>")}},
            "delivery-status": {"code": 550, "message": "5.1.1 user unknown",
                                "description": ""}}


def _mailgun_bounce(rcpt: str, pid: str, mid: str, at: float | None = None) -> Built:
    return w.mailgun_body(_mailgun_data(rcpt, mid), at=at), {}


def _mailgun_redeliver(built: Built) -> Built:
    return w.mailgun_body(json.loads(built[0])["event-data"], at=time.time() + 1), {}


def _mailgun_forge(built: Built) -> Built:
    doc = json.loads(built[0])
    return w.mailgun_body(doc["event-data"], key="key-not-the-right-one-000000000"), {}


def _mailgun_unsigned(built: Built) -> Built:
    doc = json.loads(built[0])
    del doc["signature"]
    return json.dumps(doc).encode(), {}


MAILGUN = Case("mailgun", _mailgun_bounce, _mailgun_redeliver, _mailgun_forge,
               lambda r, p, m: _mailgun_bounce(r, p, m, at=time.time() - 3600),
               replay_refused=True, unsigned=_mailgun_unsigned)


# -- Brevo ----------------------------------------------------------------------------------------

def _brevo_bounce(rcpt: str, pid: str, mid: str) -> Built:
    doc = {"event": "hard_bounce", "email": rcpt, "id": 123456, "date": "2025-01-20 10:00:00",
           "ts": int(time.time()), "message-id": mid, "ts_event": int(time.time()),
           "ts_epoch": int(time.time() * 1000), "subject": "Your order",
           "reason": "550 5.1.1 user unknown", "sending_ip": "203.0.113.7"}
    return json.dumps(doc).encode(), {"Authorization": f"Bearer {w.BREVO_TOKEN}"}


BREVO = Case("brevo", _brevo_bounce, lambda b: b,
             lambda b: (b[0], {"Authorization": "Bearer not-the-token-0000000"}), None,
             replay_refused=False)


# -- SES through SNS ----------------------------------------------------------------------------

def ses_case(signer: w.SnsSigner, origin: str) -> Case:
    def bounce(rcpt: str, pid: str, mid: str, at: datetime | None = None) -> Built:
        doc = w.sns_notification(signer, origin, w.ses_bounce(rcpt, pid, message_id=mid),
                                 at=at)
        return json.dumps(doc).encode(), {"x-amz-sns-message-type": "Notification"}

    def redeliver(built: Built) -> Built:
        doc = json.loads(built[0])
        again = w.sns_notification(signer, origin, json.loads(doc["Message"]))
        return json.dumps(again).encode(), built[1]

    def forge(built: Built) -> Built:
        doc = json.loads(built[0])
        doc["Message"] = doc["Message"].replace("@", "@x", 1)
        return json.dumps(doc).encode(), built[1]

    def unsigned(built: Built) -> Built:
        doc = json.loads(built[0])
        del doc["Signature"]
        return json.dumps(doc).encode(), built[1]

    return Case("ses", bounce, redeliver, forge,
                lambda r, p, m: bounce(r, p, m, at=datetime.now(UTC) - timedelta(hours=3)),
                replay_refused=True, unsigned=unsigned)
