"""SendGrid's Event Webhook, signed with ECDSA.

SendGrid signs ``{timestamp}{body}`` (SHA-256, ECDSA over P-256) and sends the
base64 DER signature in ``X-Twilio-Email-Event-Webhook-Signature`` and the timestamp
in ``X-Twilio-Email-Event-Webhook-Timestamp``; the verification key from the mail
settings is a base64 DER public key (a PEM is accepted too). The body is a JSON
array of events, each with a unique ``sg_event_id``.

The replay nonce is the timestamp and the signature in its low-S form: ECDSA
signatures can be flipped into a second valid one, which must not pass as new.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from mailout.exceptions import ConfigError
from mailout.feedback.dsn import provider_bounce_kind
from mailout.feedback.events import clip, from_timestamp, normalize_message_id, payload_text
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
    text_field,
    unauthorized,
)

if TYPE_CHECKING:
    from mailout.webhooks.settings import WebhookSettings

SIGNATURE_HEADER = "X-Twilio-Email-Event-Webhook-Signature"
TIMESTAMP_HEADER = "X-Twilio-Email-Event-Webhook-Timestamp"
TYPES = {
    "delivered": EventType.DELIVERED,
    "bounce": EventType.BOUNCED,
    "deferred": EventType.DEFERRED,
    "dropped": EventType.REJECTED,
    "spamreport": EventType.COMPLAINED,
    "unsubscribe": EventType.UNSUBSCRIBED,
    "group_unsubscribe": EventType.UNSUBSCRIBED,
}
IGNORED = frozenset({"processed", "open", "click", "group_resubscribe"})
_P256_ORDER = int("FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551", 16)


def load_public_key(raw: str) -> ec.EllipticCurvePublicKey:
    """The verification key: base64 DER (as SendGrid shows it) or PEM."""
    try:
        if "BEGIN PUBLIC KEY" in raw:
            key = serialization.load_pem_public_key(raw.encode())
        else:
            key = serialization.load_der_public_key(base64.b64decode(raw, validate=True))
    except (ValueError, binascii.Error, TypeError):
        raise ConfigError("MAILOUT_WEBHOOK_SENDGRID_KEY", "is not a public key") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ConfigError("MAILOUT_WEBHOOK_SENDGRID_KEY", "must be an elliptic-curve key")
    return key


class SendgridReceiver:
    provider = Provider.SENDGRID

    def __init__(self, key: str, tolerance: float) -> None:
        self._key = load_public_key(key)
        self._tolerance = tolerance

    def receive(self, request: Request, now: float) -> Parsed:
        signature = request.require(SIGNATURE_HEADER)
        stamp = request.require(TIMESTAMP_HEADER)
        try:
            der = base64.b64decode(signature, validate=True)
            r, s = decode_dss_signature(der)
            self._key.verify(der, stamp.encode() + request.body, ec.ECDSA(hashes.SHA256()))
        except (binascii.Error, ValueError, InvalidSignature):
            raise unauthorized("the SendGrid signature does not verify") from None
        check_timestamp(stamp, now, self._tolerance)
        low_s = min(s, _P256_ORDER - s)
        nonce = hashlib.sha256(f"{stamp}:{r:x}:{low_s:x}".encode()).hexdigest()
        doc = json_body(request.body)
        if not isinstance(doc, list):
            raise bad_request("the body must be a JSON array of events")
        events: list[Event] = []
        ignored = 0
        for item in doc:
            event = self._event(require_dict(item, "each event"))
            if event is None:
                ignored += 1
            else:
                events.append(event)
        return Parsed(events=tuple(events), nonce=nonce, ignored=ignored)

    def _event(self, item: dict[str, Any]) -> Event | None:
        kind = text_field(item, "event")
        assert kind is not None
        if kind in IGNORED:
            return None
        etype = TYPES.get(kind)
        if etype is None:
            raise bad_request(f"unknown SendGrid event type {kind[:60]!r}", UNKNOWN_EVENT)
        event_id = text_field(item, "sg_event_id")
        stamp = text_field(item, "timestamp")
        assert event_id is not None
        assert stamp is not None
        try:
            occurred = from_timestamp(stamp)
        except (ValueError, OverflowError, OSError):
            raise bad_request("timestamp is not a Unix time") from None
        text = " ".join(str(item[k]) for k in ("status", "reason", "response")
                        if isinstance(item.get(k), str | int) and item.get(k))
        subtype = None
        if etype is EventType.BOUNCED:
            # type "blocked": the receiver refused for now (reputation, content).
            blocked = item.get("type") == "blocked"
            subtype = (BounceKind.SOFT if blocked else provider_bounce_kind(True, text)).value
        return Event(
            provider=self.provider, event_id=event_id, type=etype, subtype=subtype,
            recipient=normalize_address(text_field(item, "email") or ""),
            occurred_at=occurred,
            provider_message_id=text_field(item, "sg_message_id", required=False),
            message_id=normalize_message_id(text_field(item, "smtp-id", required=False)),
            diagnostic=clip(text), payload=payload_text(item))


def from_settings(settings: WebhookSettings) -> SendgridReceiver | None:
    """The receiver, when ``MAILOUT_WEBHOOK_SENDGRID_KEY`` is set."""
    if settings.sendgrid_key is None:
        return None
    return SendgridReceiver(settings.sendgrid_key, settings.tolerance)
