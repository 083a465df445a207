"""Brevo (formerly Sendinblue) transactional webhooks, authenticated by basic auth or
a bearer token.

Brevo signs nothing: a webhook carries basic auth credentials in its URL or a
bearer token (both set in Brevo's webhook settings), which mailout checks in
constant time. Events have no unique id, so one is derived from the event name,
address, Message-ID and time: a replay is accepted but stored once. The body is one
event, or an array of them when batching is on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mailout.feedback.dsn import provider_bounce_kind
from mailout.feedback.events import (
    clip,
    derived_id,
    from_timestamp,
    normalize_message_id,
    parse_time,
    payload_text,
)
from mailout.message.addresses import normalize_address
from mailout.models import BounceKind, Event, EventType, Provider
from mailout.webhooks.base import (
    MISSING_AUTH,
    UNKNOWN_EVENT,
    Parsed,
    Request,
    bad_request,
    check_basic_auth,
    check_bearer,
    json_body,
    require_dict,
    text_field,
    unauthorized,
)

if TYPE_CHECKING:
    from mailout.webhooks.settings import WebhookSettings

TYPES = {
    "delivered": EventType.DELIVERED,
    "hard_bounce": EventType.BOUNCED,
    "soft_bounce": EventType.BOUNCED,
    "spam": EventType.COMPLAINED,
    "complaint": EventType.COMPLAINED,
    "unsubscribed": EventType.UNSUBSCRIBED,
    "blocked": EventType.REJECTED,
    "invalid_email": EventType.REJECTED,
    "error": EventType.REJECTED,
    "deferred": EventType.DEFERRED,
}
IGNORED = frozenset({"request", "sent", "opened", "unique_opened", "click", "proxy_open",
                     "unique_proxy_open"})


class BrevoReceiver:
    provider = Provider.BREVO

    def __init__(self, basic: str | None, token: str | None) -> None:
        if basic is None and token is None:
            raise ValueError("Brevo needs basic auth credentials or a token")
        self._basic = basic
        self._token = token

    def receive(self, request: Request, now: float) -> Parsed:
        given = (request.header("authorization") or "").lower()
        if self._token is not None and given.startswith("bearer "):
            check_bearer(request, self._token)
        elif self._basic is not None and given.startswith("basic "):
            check_basic_auth(request, self._basic)
        elif given:
            raise unauthorized("wrong kind of credentials")
        else:
            raise unauthorized("credentials are required", MISSING_AUTH)
        doc = json_body(request.body)
        items = doc if isinstance(doc, list) else [doc]
        events = [self._event(require_dict(item, "each event")) for item in items]
        kept = tuple(e for e in events if e is not None)
        return Parsed(events=kept, ignored=len(events) - len(kept))

    def _event(self, item: dict[str, Any]) -> Event | None:
        kind = text_field(item, "event")
        assert kind is not None
        if kind in IGNORED:
            return None
        etype = TYPES.get(kind)
        if etype is None:
            raise bad_request(f"unknown Brevo event type {kind[:60]!r}", UNKNOWN_EVENT)
        recipient = normalize_address(text_field(item, "email") or "")
        mid = text_field(item, "message-id", required=False)
        occurred = _when(item)
        reason = text_field(item, "reason", required=False)
        subtype = None
        if kind == "hard_bounce":
            subtype = provider_bounce_kind(True, reason).value
        elif kind == "soft_bounce":
            subtype = BounceKind.SOFT.value
        return Event(
            provider=self.provider,
            event_id=derived_id(kind, recipient, mid, item.get("ts_epoch") or
                                item.get("ts_event") or item.get("date")),
            type=etype, subtype=subtype, recipient=recipient, occurred_at=occurred,
            provider_message_id=mid, message_id=normalize_message_id(mid),
            diagnostic=clip(" ".join(x for x in (kind, reason) if x)),
            payload=payload_text(item))


def _when(item: dict[str, Any]) -> Any:
    for name in ("ts_epoch", "ts_event", "ts"):
        value = item.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return from_timestamp(value)
            except (ValueError, OverflowError, OSError):
                break
    date = item.get("date")
    if isinstance(date, str):
        try:
            return parse_time(date.replace(" ", "T", 1))
        except ValueError:
            pass
    raise bad_request("the event has no readable time (ts_epoch, ts_event or date)")


def from_settings(settings: WebhookSettings) -> BrevoReceiver | None:
    """The receiver, when ``MAILOUT_WEBHOOK_BREVO_AUTH`` or ``_TOKEN`` is set."""
    if settings.brevo_auth is None and settings.brevo_token is None:
        return None
    return BrevoReceiver(settings.brevo_auth, settings.brevo_token)
