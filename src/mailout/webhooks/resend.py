"""Resend webhooks, signed by Svix.

Svix signs ``{svix-id}.{svix-timestamp}.{body}`` with HMAC-SHA256 under the
endpoint's secret (``whsec_`` + base64 key) and sends ``v1,<base64>`` signatures,
space-separated, in ``svix-signature``. The timestamp must be within the tolerance;
``svix-id`` names the message and stays the same when Svix retries, each retry with
a fresh timestamp and signature. So the replay nonce is id and timestamp together:
an exact copy is refused, a genuine retry is accepted and its events are stored once
(their ids derive from ``svix-id``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import TYPE_CHECKING, Any

from mailout.feedback.events import clip, parse_time, payload_text
from mailout.message.addresses import normalize_address
from mailout.models import BounceKind, Event, EventType, Provider
from mailout.webhooks.base import (
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
    "email.delivered": EventType.DELIVERED,
    "email.bounced": EventType.BOUNCED,
    "email.complained": EventType.COMPLAINED,
    "email.delivery_delayed": EventType.DEFERRED,
    "email.failed": EventType.REJECTED,  # Resend could not send it (invalid, quota)
    "email.suppressed": EventType.REJECTED,  # on Resend's own suppression list
}
IGNORED = frozenset({"email.sent", "email.opened", "email.clicked", "email.scheduled",
                     "email.received", "contact.created", "contact.updated",
                     "contact.deleted", "domain.created", "domain.updated", "domain.deleted"})
_BOUNCE_KINDS = {"permanent": BounceKind.HARD, "transient": BounceKind.SOFT,
                 "undetermined": BounceKind.SOFT}


def svix_signature(secret: bytes, msg_id: str, timestamp: str, body: bytes) -> str:
    """The ``v1,...`` signature Svix sends for this content."""
    digest = hmac.new(secret, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(digest.digest()).decode()


class ResendReceiver:
    provider = Provider.RESEND

    def __init__(self, secret: bytes, tolerance: float) -> None:
        self._secret = secret
        self._tolerance = tolerance

    def receive(self, request: Request, now: float) -> Parsed:
        msg_id = request.header("svix-id") or request.require("webhook-id")
        stamp = request.header("svix-timestamp") or request.require("webhook-timestamp")
        given = request.header("svix-signature") or request.require("webhook-signature")
        expected = svix_signature(self._secret, msg_id, stamp, request.body).encode()
        offered = [s.encode() for s in given.split() if s.startswith("v1,")]
        # Every candidate is compared, so the time taken does not say which one matched.
        matches = [hmac.compare_digest(expected, s) for s in offered]  # all, not the first
        if not any(matches):
            raise unauthorized("the Svix signature does not match")
        check_timestamp(stamp, now, self._tolerance)
        return self._parse(require_dict(json_body(request.body), "the body"), msg_id,
                           nonce=f"{msg_id}.{stamp}")

    def _parse(self, doc: dict[str, Any], msg_id: str, nonce: str) -> Parsed:
        kind = text_field(doc, "type")
        assert kind is not None
        if kind in IGNORED:
            return Parsed(nonce=nonce, ignored=1)
        etype = TYPES.get(kind)
        if etype is None:
            raise bad_request(f"unknown Resend event type {kind[:60]!r}", UNKNOWN_EVENT)
        data = require_dict(doc.get("data"), "data")
        to = data.get("to")
        recipients = [to] if isinstance(to, str) else to
        if not isinstance(recipients, list) or not recipients or not all(
                isinstance(r, str) for r in recipients):
            raise bad_request("data.to must name the recipients")
        when = text_field(doc, "created_at")
        assert when is not None
        try:
            occurred = parse_time(when)
        except ValueError:
            raise bad_request("created_at is not an ISO 8601 time") from None
        subtype, diagnostic = _detail(etype, data)
        return Parsed(nonce=nonce, events=tuple(
            Event(provider=self.provider, event_id=f"{msg_id}:{normalize_address(rcpt)}",
                  type=etype, subtype=subtype, recipient=normalize_address(rcpt),
                  occurred_at=occurred,
                  provider_message_id=text_field(data, "email_id", required=False),
                  diagnostic=diagnostic, payload=payload_text(doc))
            for rcpt in recipients))


def _detail(etype: EventType, data: dict[str, Any]) -> tuple[str | None, str | None]:
    if etype is EventType.BOUNCED:
        bounce = sub_dict(data, "bounce")
        kind = _BOUNCE_KINDS.get(str(bounce.get("type", "")).lower(), BounceKind.SOFT)
        text = " ".join(str(bounce[k]) for k in ("type", "subType", "message") if bounce.get(k))
        return kind.value, clip(text)
    if etype is EventType.REJECTED:
        failed = sub_dict(data, "failed")
        return None, clip(str(failed.get("reason") or "")) or None
    return None, None


def from_settings(settings: WebhookSettings) -> ResendReceiver | None:
    """The receiver, when ``MAILOUT_WEBHOOK_RESEND_SECRET`` is set."""
    if settings.resend_secret is None:
        return None
    return ResendReceiver(settings.resend_secret, settings.tolerance)
