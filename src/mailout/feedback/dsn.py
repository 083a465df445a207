"""Bounces and complaints that arrive as mail: RFC 3464 delivery status notifications
and RFC 5965 abuse feedback reports, parsed into :class:`~mailout.models.Event` records.

A DSN is a ``multipart/report; report-type=delivery-status``: a human-readable part,
a ``message/delivery-status`` part (one block of per-message fields, then one block per
recipient: ``Final-Recipient``, ``Action``, ``Status``, ``Diagnostic-Code``...) and
usually the original message or its headers. An ARF report has a
``message/feedback-report`` part (``Feedback-Type``, ``Original-Rcpt-To``...) in
place of the delivery status. Both carry the original ``Message-ID`` in the enclosed
headers, which is how they are linked back to the outbox row; a VERP return path
(``bounces+{id}@shop.example``), found in the headers the receiving MTA adds
(``X-Original-To``, ``Delivered-To``) or in the original's ``Return-Path``, is the
other way.

Per recipient, ``Action: failed`` with a 5.x.x status is a hard bounce, with 4.x.x a
soft one (the sender gave up on a temporary problem); ``delayed`` is a deferral;
``delivered``, ``relayed`` and ``expanded`` are deliveries. An ARF report is a
complaint whose subtype is the feedback type (``not-spam`` reports are skipped).

:func:`parse` raises :class:`ReportError` for anything that is not such a report
(a plain-text bounce, a report without recipients, unreadable bytes): nothing is
guessed from free text.
"""

from __future__ import annotations

import email
import mailbox
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from email.message import Message
from email.utils import parsedate_to_datetime
from pathlib import Path

from mailout.exceptions import MailoutError
from mailout.feedback.bounce_rules import classify
from mailout.feedback.events import clip, derived_id, normalize_message_id, payload_text
from mailout.message.addresses import normalize_address
from mailout.models import BounceKind, Event, EventType, Provider

MAX_REPORT_BYTES = 10_000_000
MAX_ARF_RECIPIENTS = 100  # Original-Rcpt-To fields read from one feedback report
AUTH_FAILURE = "auth-failure"  # RFC 6591's Feedback-Type: not a complaint
_STATUS = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")
_DELIVERY_STATUS = ("message/delivery-status", "message/global-delivery-status")
_FEEDBACK = ("message/feedback-report",)
_ORIGINAL = ("message/rfc822", "message/global", "text/rfc822-headers",
             "message/rfc822-headers", "message/global-headers")
_VERP_HEADERS = ("X-Original-To", "Delivered-To", "Envelope-To", "To")
_DELIVERED_ACTIONS = frozenset({"delivered", "relayed", "expanded"})


class ReportError(MailoutError, ValueError):
    """Input that is not a readable DSN or ARF report; ``source`` names where it came from."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}")


def parse(data: bytes, source: str = "<input>") -> list[Event]:
    """The events in one report (one per recipient). Raises :class:`ReportError`."""
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError(source, f"larger than {MAX_REPORT_BYTES} bytes")
    if not data.strip():
        raise ReportError(source, "empty input")
    try:
        msg = email.message_from_bytes(data)
        return parse_message(msg, source, fingerprint=derived_id(data))
    except ReportError:
        raise
    except (ValueError, TypeError, AttributeError, LookupError, UnicodeError) as exc:
        # The email package can trip over mangled input in many ways: unreadable.
        raise ReportError(source, f"unreadable ({type(exc).__name__})") from None


def parse_message(msg: Message, source: str = "<input>",
                  fingerprint: str | None = None) -> list[Event]:
    """:func:`parse` for an already parsed message."""
    if msg.get_content_type() != "multipart/report":
        raise ReportError(source, f"not a multipart/report but {msg.get_content_type()}: "
                          "only RFC 3464 DSNs and RFC 5965 ARF reports are read")
    own_id = normalize_message_id(_h(msg, "Message-ID")) or fingerprint or ""
    original = _original_headers(msg)
    return_path = _return_path(msg, original)
    for part in msg.walk():
        kind = part.get_content_type()
        if kind in _DELIVERY_STATUS:
            return _dsn_events(part, msg, original, return_path, own_id, source)
        if kind in _FEEDBACK:
            return _arf_events(part, msg, original, return_path, own_id, source)
    raise ReportError(source, "a multipart/report without a message/delivery-status or "
                      "message/feedback-report part")


def read_mbox(path: Path) -> Iterator[tuple[str, bytes]]:
    """Each message of an mbox file as (source label, raw bytes)."""
    box = mailbox.mbox(str(path), create=False)
    try:
        for i, key in enumerate(box.iterkeys(), start=1):
            yield f"{path}#{i}", box.get_bytes(key)
    finally:
        box.close()


def _h(msg: Message, name: str) -> str | None:
    """A header as text (an undecodable one comes back as a Header object), or None."""
    value = msg.get(name)
    return None if value is None else str(value)


# -- RFC 3464 ----------------------------------------------------------------------

def _blocks(part: Message, source: str) -> list[Message]:
    payload = part.get_payload()
    if isinstance(payload, list) and payload and all(isinstance(b, Message) for b in payload):
        return list(payload)
    raw = part.get_payload(decode=True)
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(payload or "")
    blocks = [email.message_from_string(chunk.strip() + "\n")
              for chunk in re.split(r"\r?\n\s*\r?\n", text) if chunk.strip()]
    if not blocks:
        raise ReportError(source, "the delivery-status part is empty")
    return blocks


def _dsn_events(part: Message, msg: Message, original: Message | None,
                return_path: str | None, own_id: str, source: str) -> list[Event]:
    blocks = _blocks(part, source)
    per_message, recipients = blocks[0], blocks[1:]
    if _h(per_message, "Final-Recipient") and not _h(per_message, "Reporting-MTA"):
        recipients = blocks  # a report without the per-message block
        per_message = Message()
    if not recipients:
        raise ReportError(source, "the delivery status names no recipient")
    message_id = _original_message_id(original)
    fallback_time = _date(_h(per_message, "Arrival-Date")) or _date(_h(msg, "Date"))
    events = []
    for block in recipients:
        event = _recipient_event(block, message_id, return_path, own_id, fallback_time)
        if event is not None:
            events.append(event)
    if not events:
        raise ReportError(source, "no recipient block has a Final-Recipient and an Action")
    return events


def _recipient_event(block: Message, message_id: str | None, return_path: str | None,
                     own_id: str, fallback_time: datetime | None) -> Event | None:
    final = _h(block, "Final-Recipient") or _h(block, "Original-Recipient")
    action = (_h(block, "Action") or "").strip().lower()
    if not final or not action:
        return None
    recipient = normalize_address(_address_field(final))
    status = (_h(block, "Status") or "").strip()
    diagnostic = clip(_unfold(_h(block, "Diagnostic-Code")))
    reason = None
    if action == "failed":
        verdict = classify(status, diagnostic)
        etype, subtype, reason = EventType.BOUNCED, verdict.kind.value, verdict.reason.value
    elif action == "delayed":
        etype, subtype = EventType.DEFERRED, None
    elif action in _DELIVERED_ACTIONS:
        etype, subtype = EventType.DELIVERED, None
    else:
        return None
    detail = " ".join(x for x in (status, diagnostic) if x) or None
    occurred = _date(_h(block, "Last-Attempt-Date")) or fallback_time or datetime.now(UTC)
    record = {k: _unfold(v) for k, v in block.items()}
    return Event(
        provider=Provider.DSN, event_id=derived_id("dsn", own_id, recipient, action, status),
        type=etype, subtype=subtype, reason=reason, recipient=recipient, occurred_at=occurred,
        message_id=message_id, return_path=return_path, diagnostic=clip(detail),
        payload=payload_text(record),
    )


def bounce_kind(status: str | None, diagnostic: str | None = None) -> BounceKind:
    """Hard only for a permanent failure of the mailbox or its domain, as
    :func:`mailout.feedback.bounce_rules.classify` judges the Status and the diagnostic together."""
    return classify(status, diagnostic).kind


# -- RFC 5965 ----------------------------------------------------------------------

def _arf_events(part: Message, msg: Message, original: Message | None,
                return_path: str | None, own_id: str, source: str) -> list[Event]:
    blocks = _blocks(part, source)
    report = blocks[0]
    feedback = (_h(report, "Feedback-Type") or "").strip().lower()
    if not feedback:
        raise ReportError(source, "the feedback report has no Feedback-Type")
    if feedback == "not-spam":
        return []
    message_id = _original_message_id(original)
    # Only Original-Rcpt-To names the complainant. The enclosed message's To: is
    # whatever the sender wrote (10,000 addresses, in a forged report): never read it.
    recipients = [normalize_address(_address_field(v))
                  for v in report.get_all("Original-Rcpt-To") or []][:MAX_ARF_RECIPIENTS]
    if not recipients and message_id is None and return_path is None:
        raise ReportError(source, "the complaint names neither a recipient nor the "
                          "original Message-ID")
    occurred = (_date(_h(report, "Arrival-Date")) or _date(_h(report, "Received-Date"))
                or _date(_h(msg, "Date")) or datetime.now(UTC))
    record = {k: _unfold(v) for k, v in report.items()}
    return [
        Event(provider=Provider.ARF, event_id=derived_id("arf", own_id, rcpt),
              type=(EventType.AUTH_FAILURE if feedback == AUTH_FAILURE
                    else EventType.COMPLAINED), subtype=feedback[:32], recipient=rcpt,
              occurred_at=occurred, message_id=message_id, return_path=return_path,
              diagnostic=clip(f"feedback {feedback} from "
                              f"{_unfold(report.get('User-Agent')) or 'unknown agent'}"),
              payload=payload_text(record))
        for rcpt in recipients or [""]  # redacted: the linked row names the recipient
    ]


# -- shared ------------------------------------------------------------------------

def _original_headers(msg: Message) -> Message | None:
    for part in msg.walk():
        kind = part.get_content_type()
        if kind not in _ORIGINAL:
            continue
        payload = part.get_payload()
        if isinstance(payload, list) and payload and isinstance(payload[0], Message):
            return payload[0]
        raw = part.get_payload(decode=True)
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(payload)
        return email.message_from_string(text.lstrip())
    return None


def _original_message_id(original: Message | None) -> str | None:
    if original is None:
        return None
    return normalize_message_id(_h(original, "Message-ID"))


def _return_path(msg: Message, original: Message | None) -> str | None:
    """Where the bounce was sent: the address a VERP return path would show up as."""
    for name in _VERP_HEADERS:
        value = _h(msg, name)
        if value and "+" in value:
            return normalize_address(email.utils.parseaddr(str(value))[1] or str(value))
    if original is not None and _h(original, "Return-Path"):
        return normalize_address(str(_h(original, "Return-Path")))
    return None


def _address_field(value: str) -> str:
    """``rfc822; user@example.com`` -> ``user@example.com``."""
    _, _, address = str(value).partition(";")
    return address if address.strip() else str(value)


def _unfold(value: object) -> str | None:
    if value is None:
        return None
    return re.sub(r"\s*\r?\n\s*", " ", str(value)).strip()


def _date(value: object) -> datetime | None:
    if not value:
        return None
    try:
        moment = parsedate_to_datetime(str(value).strip())
    except (TypeError, ValueError, IndexError):
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def provider_bounce_kind(permanent: bool, text: str | None) -> BounceKind:
    """A bounce a provider classified itself (permanent or not): permanent is hard,
    unless its text carries an enhanced status code that blames something other
    than the address (5.7.1: our IP is blocked), which :func:`bounce_kind` calls soft."""
    if not permanent:
        return BounceKind.SOFT
    code = _STATUS.search(text or "")
    if code is not None and code.group(1) == "5" and bounce_kind(code.group(0)) is BounceKind.SOFT:
        return BounceKind.SOFT
    return BounceKind.HARD
