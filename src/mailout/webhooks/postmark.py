"""Postmark webhooks, authenticated by HTTP basic auth.

Postmark signs nothing; what it offers is basic auth credentials in the webhook URL
(``https://user:password@host/webhooks/postmark``), which mailout checks in constant
time. Without a signature there is no replay nonce: a replayed request is accepted,
but its events are stored once (Bounce and SpamComplaint records carry Postmark's
``ID``; deliveries and subscription changes get an id derived from their content).

Record types: ``Delivery``, ``Bounce`` (by ``Type``), ``SpamComplaint`` and
``SubscriptionChange`` are stored; ``Open`` and ``Click`` are ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mailout.feedback.events import clip, derived_id, parse_time, payload_text
from mailout.message.addresses import normalize_address
from mailout.models import BounceKind, Event, EventType, Provider
from mailout.webhooks.base import (
    UNKNOWN_EVENT,
    Parsed,
    Request,
    bad_request,
    check_basic_auth,
    json_body,
    require_dict,
    text_field,
)

if TYPE_CHECKING:
    from mailout.webhooks.settings import WebhookSettings

IGNORED = frozenset({"Open", "Click"})
HARD = frozenset({"HardBounce", "BadEmailAddress", "ManuallyDeactivated", "Unconfirmed"})
REJECTED = frozenset({"Blocked", "SMTPApiError", "DMARCPolicy", "TemplateRenderingFailed"})
NOT_BOUNCES = frozenset({"AutoResponder", "Subscribe", "AddressChange", "OpenRelayTest",
                         "ChallengeVerification", "InboundError"})


class PostmarkReceiver:
    provider = Provider.POSTMARK

    def __init__(self, credentials: str) -> None:
        self._credentials = credentials

    def receive(self, request: Request, now: float) -> Parsed:
        check_basic_auth(request, self._credentials)
        doc = require_dict(json_body(request.body), "the body")
        kind = text_field(doc, "RecordType")
        assert kind is not None
        if kind in IGNORED:
            return Parsed(ignored=1)
        if kind == "Delivery":
            return self._one(doc, EventType.DELIVERED, None, "DeliveredAt", "Recipient")
        if kind == "SpamComplaint":
            return self._one(doc, EventType.COMPLAINED, "abuse", "BouncedAt", "Email")
        if kind == "Bounce":
            return self._bounce(doc)
        if kind == "SubscriptionChange":
            if doc.get("SuppressSending") is not True:
                return Parsed(ignored=1)  # a reactivation: never unsuppress by webhook
            reason = text_field(doc, "SuppressionReason", required=False)
            return self._one(doc, EventType.UNSUBSCRIBED, (reason or "")[:32] or None,
                             "ChangedAt", "Recipient")
        raise bad_request(f"unknown Postmark RecordType {kind[:60]!r}", UNKNOWN_EVENT)

    def _bounce(self, doc: dict[str, Any]) -> Parsed:
        btype = text_field(doc, "Type") or ""
        if btype in NOT_BOUNCES:
            return Parsed(ignored=1)
        if btype == "SpamComplaint":
            return self._one(doc, EventType.COMPLAINED, "abuse", "BouncedAt", "Email")
        if btype in REJECTED:
            return self._one(doc, EventType.REJECTED, btype[:32], "BouncedAt", "Email")
        kind = BounceKind.HARD if btype in HARD else BounceKind.SOFT
        return self._one(doc, EventType.BOUNCED, kind.value, "BouncedAt", "Email")

    def _one(self, doc: dict[str, Any], etype: EventType, subtype: str | None,
             time_field: str, address_field: str) -> Parsed:
        recipient = normalize_address(text_field(doc, address_field) or "")
        when = text_field(doc, time_field)
        assert when is not None
        try:
            occurred = parse_time(when)
        except ValueError:
            raise bad_request(f"{time_field} is not an ISO 8601 time") from None
        pid = text_field(doc, "MessageID", required=False)
        own = text_field(doc, "ID", required=False)
        event_id = (f"{doc['RecordType']}:{own}" if own
                    else derived_id(doc["RecordType"], pid, recipient, when))
        detail = " ".join(str(doc[k]) for k in ("Type", "Description", "Details")
                          if doc.get(k) and isinstance(doc[k], str))
        return Parsed(events=(Event(
            provider=self.provider, event_id=event_id, type=etype, subtype=subtype,
            recipient=recipient, occurred_at=occurred, provider_message_id=pid,
            diagnostic=clip(detail), payload=payload_text(doc)),))


def from_settings(settings: WebhookSettings) -> PostmarkReceiver | None:
    """The receiver, when ``MAILOUT_WEBHOOK_POSTMARK_AUTH`` is set."""
    if settings.postmark_auth is None:
        return None
    return PostmarkReceiver(settings.postmark_auth)
