"""Mailgun webhooks, signed with HMAC-SHA256.

Mailgun puts the signature in the JSON body: ``signature.timestamp``,
``signature.token`` (50 random characters) and ``signature.signature``, the hex
HMAC-SHA256 of timestamp + token under the webhook signing key. The body must be
parsed to find the signature, so invalid JSON is a 400 before any verification; the
event itself is only read once the signature verified. The token is the replay
nonce, as Mailgun recommends; each event has a unique ``id``.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Any

from mailout.feedback.dsn import provider_bounce_kind
from mailout.feedback.events import clip, from_timestamp, normalize_message_id, payload_text
from mailout.message.addresses import normalize_address
from mailout.models import BounceKind, Event, EventType, Provider
from mailout.webhooks.base import (
    MISSING_AUTH,
    UNKNOWN_EVENT,
    Parsed,
    Request,
    bad_request,
    check_timestamp,
    json_body,
    require_dict,
    sub_dict,
    text_field,
    unauthorized,
)

if TYPE_CHECKING:
    from mailout.webhooks.settings import WebhookSettings

TYPES = {
    "delivered": EventType.DELIVERED,
    "complained": EventType.COMPLAINED,
    "unsubscribed": EventType.UNSUBSCRIBED,
    "rejected": EventType.REJECTED,
}
IGNORED = frozenset({"accepted", "opened", "clicked", "stored", "list_member_uploaded",
                     "list_member_upload_error", "list_uploaded"})


def mailgun_signature(key: bytes, timestamp: str, token: str) -> str:
    return hmac.new(key, (timestamp + token).encode(), hashlib.sha256).hexdigest()


class MailgunReceiver:
    provider = Provider.MAILGUN

    def __init__(self, key: bytes, tolerance: float) -> None:
        self._key = key
        self._tolerance = tolerance

    def receive(self, request: Request, now: float) -> Parsed:
        doc = require_dict(json_body(request.body), "the body")
        sig = doc.get("signature")
        if not isinstance(sig, dict) or not all(
                isinstance(sig.get(k), str | int) for k in ("timestamp", "token", "signature")):
            raise unauthorized("the body carries no Mailgun signature", MISSING_AUTH)
        stamp, token = str(sig["timestamp"]), str(sig["token"])
        expected = mailgun_signature(self._key, stamp, token)
        if not hmac.compare_digest(expected.encode(), str(sig["signature"]).encode()):
            raise unauthorized("the Mailgun signature does not match")
        check_timestamp(stamp, now, self._tolerance)
        data = require_dict(doc.get("event-data"), "event-data")
        event = self._event(data)
        return Parsed(events=() if event is None else (event,), nonce=f"{stamp}:{token}",
                      ignored=int(event is None))

    def _event(self, data: dict[str, Any]) -> Event | None:
        kind = text_field(data, "event")
        assert kind is not None
        if kind in IGNORED:
            return None
        status = sub_dict(data, "delivery-status")
        text = " ".join(str(status[k]) for k in ("code", "description", "message")
                        if status.get(k))
        reason = text_field(data, "reason", required=False) or ""
        subtype = None
        if kind == "failed":
            permanent = data.get("severity") == "permanent"
            if not permanent:
                etype = EventType.DEFERRED
            elif reason.startswith("suppress-"):  # Mailgun's own list: never sent
                etype = EventType.REJECTED
            else:
                etype = EventType.BOUNCED
                subtype = provider_bounce_kind(True, text).value
        elif kind in TYPES:
            etype = TYPES[kind]
        else:
            raise bad_request(f"unknown Mailgun event type {kind[:60]!r}", UNKNOWN_EVENT)
        if etype is EventType.BOUNCED and subtype is None:
            subtype = BounceKind.HARD.value
        event_id, stamp = text_field(data, "id"), text_field(data, "timestamp")
        assert event_id is not None
        assert stamp is not None
        try:
            occurred = from_timestamp(stamp)
        except (ValueError, OverflowError, OSError):
            raise bad_request("timestamp is not a Unix time") from None
        headers = sub_dict(sub_dict(data, "message"), "headers")
        mid = headers.get("message-id") if isinstance(headers.get("message-id"), str) else None
        return Event(
            provider=self.provider, event_id=event_id, type=etype, subtype=subtype,
            recipient=normalize_address(text_field(data, "recipient") or ""),
            occurred_at=occurred, provider_message_id=mid,
            message_id=normalize_message_id(mid),
            diagnostic=clip(" ".join(x for x in (reason, text) if x)),
            payload=payload_text(data))


def from_settings(settings: WebhookSettings) -> MailgunReceiver | None:
    """The receiver, when ``MAILOUT_WEBHOOK_MAILGUN_KEY`` is set."""
    if settings.mailgun_key is None:
        return None
    return MailgunReceiver(settings.mailgun_key, settings.tolerance)
