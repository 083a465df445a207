"""Receivers on arbitrary (correctly signed) JSON: events or a WebhookError, never a crash.

A provider is trusted to sign, not to send well-formed records; a surprise in a
signed body must be a clear 4xx, not a 500."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from bench.support import webhooks as w
from hypothesis import given, settings
from hypothesis import strategies as st
from svix.webhooks import Webhook

from mailout.models import Event
from mailout.webhooks.base import Receiver, Request, WebhookError
from mailout.webhooks.brevo import BrevoReceiver
from mailout.webhooks.mailgun import MailgunReceiver
from mailout.webhooks.postmark import PostmarkReceiver
from mailout.webhooks.resend import ResendReceiver
from mailout.webhooks.sendgrid import SendgridReceiver
from mailout.webhooks.settings import svix_secret

KEYS = w.SendgridKeys()
SCALARS = st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(
    allow_nan=False) | st.text(max_size=30) | st.sampled_from(
    ["email.bounced", "Bounce", "HardBounce", "bounce", "failed", "permanent", "hard_bounce",
     "2025-01-01T00:00:00Z", "a@example.com", "Permanent", "Delivery", "delivered"])
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.sampled_from(["type", "data", "to", "created_at", "email_id", "bounce", "RecordType",
                     "Type", "Email", "BouncedAt", "MessageID", "ID", "event", "email",
                     "timestamp", "sg_event_id", "id", "recipient", "severity", "ts_epoch",
                     "message-id", "date", "delivery-status", "message", "headers"]),
    inner, max_size=8), max_leaves=20)


def _resend(doc: Any) -> tuple[Receiver, Request]:
    raw = json.dumps(doc)
    now = datetime.now(UTC)
    headers = {"svix-id": "msg_1", "svix-timestamp": str(int(now.timestamp())),
               "svix-signature": Webhook(w.RESEND_SECRET).sign("msg_1", now, raw)}
    return ResendReceiver(svix_secret("t", w.RESEND_SECRET), 300), Request(headers, raw.encode())


def _postmark(doc: Any) -> tuple[Receiver, Request]:
    headers = {k.lower(): v for k, v in w.basic(w.POSTMARK_AUTH).items()}
    return PostmarkReceiver(w.POSTMARK_AUTH), Request(headers, json.dumps(doc).encode())


def _brevo(doc: Any) -> tuple[Receiver, Request]:
    return BrevoReceiver(None, w.BREVO_TOKEN), Request(
        {"authorization": f"Bearer {w.BREVO_TOKEN}"}, json.dumps(doc).encode())


def _sendgrid(doc: Any) -> tuple[Receiver, Request]:
    body = json.dumps(doc).encode()
    headers = {k.lower(): v for k, v in KEYS.sign(body).items()}
    return SendgridReceiver(KEYS.public_b64, 300), Request(headers, body)


def _mailgun(doc: Any) -> tuple[Receiver, Request]:
    return MailgunReceiver(w.MAILGUN_KEY.encode(), 300), Request({}, w.mailgun_body(doc))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([_resend, _postmark, _brevo, _sendgrid, _mailgun]), JSON)
def test_signed_but_surprising_bodies_never_crash_a_receiver(build: Any, doc: Any) -> None:
    receiver, request = build(doc)
    try:
        parsed = receiver.receive(request, time.time())
    except WebhookError as exc:
        status = exc.status
    else:
        status = 200
        assert all(isinstance(e, Event) for e in parsed.events)
    assert status == 200 or 400 <= status < 500
