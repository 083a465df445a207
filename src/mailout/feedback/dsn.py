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

Per recipient, ``Action: failed`` is a bounce whose hard or soft verdict
:func:`mailout.feedback.bounce_rules.classify` gives from the status, the diagnostic
text and the refused command (a 5.x.x status alone is not enough: a filter's refusal
is soft); ``delayed`` is a deferral; ``delivered``, ``relayed`` and ``expanded`` are
deliveries. An ARF report is a
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
from dataclasses import replace
from datetime import UTC, datetime
from email.message import Message
from pathlib import Path

from mailout.exceptions import MailoutError
from mailout.feedback import plain_bounces
from mailout.feedback import report_parts as parts
from mailout.feedback.bounce_rules import classify
from mailout.feedback.events import clip, derived_id, payload_text
from mailout.models import BounceKind, Event, EventType, Provider

MAX_REPORT_BYTES = 10_000_000
MAX_ARF_RECIPIENTS = 100  # Original-Rcpt-To fields read from one feedback report
MAX_RECIPIENT_BLOCKS = 1000  # per-recipient blocks read from one delivery status
AUTH_FAILURE = "auth-failure"  # RFC 6591's Feedback-Type: not a complaint
_STATUS = re.compile(r"\b([245])\.(\d{1,3})\.(\d{1,3})\b")
_DELIVERY_STATUS = ("message/delivery-status", "message/global-delivery-status")
_FEEDBACK = ("message/feedback-report",)
# Action values, and what MTAs write instead (with comments: "failed (Bad destination
# mailbox address)"; "failure", "expired", "deliverable").
_ACTIONS = {"failed": "failed", "failure": "failed", "expired": "failed",
            "delayed": "delayed", "delivered": "delivered", "deliverable": "delivered",
            "relayed": "delivered", "expanded": "delivered"}
_ACTION_BY_CLASS = {"5": "failed", "4": "delayed", "2": "delivered"}


class ReportError(MailoutError, ValueError):
    """Input that is not a readable DSN or ARF report; ``source`` names where it came from."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}")


def parse(data: bytes, source: str = "<input>") -> list[Event]:
    """The events in one report (one per recipient). Raises :class:`ReportError`,
    and nothing else, for any input."""
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError(source, f"larger than {MAX_REPORT_BYTES} bytes")
    if not data.strip():
        raise ReportError(source, "empty input")
    try:
        msg = email.message_from_bytes(data)
        return parse_message(msg, source, fingerprint=derived_id(data))
    except ReportError:
        raise
    except (ValueError, TypeError, AttributeError, LookupError, UnicodeError,
            IndexError, RecursionError) as exc:
        # The email package can trip over mangled input in many ways: unreadable.
        raise ReportError(source, f"unreadable ({type(exc).__name__})") from None


def parse_message(msg: Message, source: str = "<input>",
                  fingerprint: str | None = None) -> list[Event]:
    """:func:`parse` for an already parsed message.

    The report part is looked for anywhere in the message, not only in a top-level
    ``multipart/report``: OpenSMTPD, McAfee and Domino wrap the report in a
    ``multipart/mixed``. A message with no report part is read as a plain-text
    bounce (:mod:`mailout.feedback.plain_bounces`).
    """
    own_id = parts.clean_message_id(parts.header(msg, "Message-ID")) or fingerprint or ""
    original = parts.original_headers(msg)
    return_path = parts.return_path(msg, original)
    for part in parts.walk(msg):
        kind = part.get_content_type()
        if kind in _DELIVERY_STATUS:
            try:
                return _dsn_events(part, msg, original, return_path, own_id, source)
            except ReportError:
                # An empty or unreadable delivery status ("Message removed"): the
                # text part may still name the address.
                if found := plain_bounces.events(msg, return_path, own_id):
                    return found
                raise
        if kind in _FEEDBACK:
            return _arf_events(part, msg, original, return_path, own_id, source)
    events = plain_bounces.events(msg, return_path, own_id)
    if not events:
        raise ReportError(source, f"not a bounce: no delivery-status or feedback-report "
                          f"part, and no failed address in the text ({msg.get_content_type()})")
    return events


def read_mbox(path: Path) -> Iterator[tuple[str, bytes]]:
    """Each message of an mbox file as (source label, raw bytes)."""
    box = mailbox.mbox(str(path), create=False)
    try:
        for i, key in enumerate(box.iterkeys(), start=1):
            yield f"{path}#{i}", box.get_bytes(key)
    finally:
        box.close()


# -- RFC 3464 ----------------------------------------------------------------------

def _blocks(part: Message, source: str) -> list[Message]:
    """The report's blocks, each read leniently and split per recipient
    (:func:`~mailout.feedback.report_parts.status_fields`,
    :func:`~mailout.feedback.report_parts.recipient_groups`)."""
    payload = part.get_payload()
    if isinstance(payload, list) and payload and all(isinstance(b, Message) for b in payload):
        parsed = list(payload)[:MAX_RECIPIENT_BLOCKS + 1]
    else:
        raw = part.get_payload(decode=True)
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(payload or "")
        chunks = [c for c in re.split(r"\r?\n[ \t]*\r?\n", text.replace("\r\n", "\n"))
                  if c.strip()][:MAX_RECIPIENT_BLOCKS + 1]
        parsed = [email.message_from_string(chunk.strip() + "\n") for chunk in chunks]
    blocks: list[Message] = []
    for block in parsed:
        room = MAX_RECIPIENT_BLOCKS + 1 - len(blocks)
        if room <= 0:
            break
        blocks.extend(parts.recipient_groups(parts.status_fields(block), room))
    if not blocks:
        raise ReportError(source, "the delivery-status part is empty")
    return blocks


def _names_a_recipient(block: Message) -> bool:
    return bool(parts.header(block, "Final-Recipient")
                or parts.header(block, "Original-Recipient"))


def _dsn_events(part: Message, msg: Message, original: Message | None,
                return_path: str | None, own_id: str, source: str) -> list[Event]:
    blocks = _blocks(part, source)
    per_message = blocks[0]
    # Some MTAs write the per-message and the first recipient's fields in one block,
    # or leave out the per-message block: every block naming a recipient is one.
    recipients = [b for b in blocks if _names_a_recipient(b)]
    if not recipients:
        raise ReportError(source, "the delivery status names no recipient")
    message_id = parts.original_message_id(original)
    fallback_time = (parts.date(parts.header(per_message, "Arrival-Date"))
                     or parts.date(parts.header(msg, "Date")))
    text = plain_bounces.own_text(msg)
    events = []
    for block in recipients:
        event = _recipient_event(block, message_id, return_path, own_id, fallback_time, text)
        if event is not None:
            events.append(event)
    if not events:
        raise ReportError(source, "no recipient block has an Action or a Status")
    return _name_the_unnamed(events, msg, text)


def _name_the_unnamed(events: list[Event], msg: Message, text: str) -> list[Event]:
    """A report whose one recipient field is not an address (a pipe command, a
    mailbox path: ``rfc822;|/usr/bin/procmail``, a bare ``@host``) often names the
    address in its text: when the text's lists of failed addresses
    (:data:`~mailout.feedback.plain_bounces.NAMING_LINES`), else the plain-text
    detectors, give exactly one address that no block names, it is that recipient's."""
    unnamed = [i for i, e in enumerate(events) if not e.recipient]
    if len(unnamed) != 1:
        return events
    named = {e.recipient for e in events}
    found = plain_bounces.named_recipients(text) - named
    if len(found) != 1:
        found = {e.recipient for e in plain_bounces.events(
            msg, None, "", original_recipient=False)} - named
    if len(found) != 1:
        return events
    i = unnamed[0]
    address = found.pop()
    return [*events[:i], replace(events[i], recipient=address), *events[i + 1:]]


def _action(block: Message, status: str) -> str | None:
    """``failed``, ``delayed`` or ``delivered``: the Action's first word, read
    leniently, else what the Status class says; None when neither says anything."""
    word = re.match(r"\s*([a-z]+)", (parts.header(block, "Action") or "").lower())
    if word and word.group(1) in _ACTIONS:
        return _ACTIONS[word.group(1)]
    code = _STATUS.search(status)
    return _ACTION_BY_CLASS.get(code.group(1)) if code else None


def _recipient(block: Message) -> str:
    """The recipient's address: ``Final-Recipient`` when it is an Internet address,
    else ``Original-Recipient`` (an X.400 or internal final address), else ""."""
    for name in ("Final-Recipient", "Original-Recipient", "X-Actual-Recipient"):
        found = parts.recipient_address(parts.header(block, name))
        if found:
            return found
    return ""


def _remote_host(block: Message) -> str | None:
    """``Remote-MTA: dns; mx.example.com [192.0.2.1]`` -> ``mx.example.com``."""
    value = parts.header(block, "Remote-MTA")
    found = re.match(r"[^;]*;\s*([A-Za-z0-9.-]+)", value or "")
    return found.group(1).rstrip(".").lower() if found else None


def _recipient_event(block: Message, message_id: str | None, return_path: str | None,
                     own_id: str, fallback_time: datetime | None, text: str) -> Event | None:
    """One recipient's event. ``text`` is the report's human-readable part: where the
    block has no ``Diagnostic-Code`` (OpenSMTPD, Gmail), what the text says next to
    the address stands in for it, and it tells which SMTP command was refused."""
    status = (parts.header(block, "Status") or "").strip()
    action = _action(block, status)
    if action is None:
        return None
    recipient = _recipient(block)
    diagnostic = clip(parts.unfold(parts.header(block, "Diagnostic-Code")))
    if not diagnostic and recipient:
        diagnostic = clip(plain_bounces.statement(text, recipient)) or None
    reason = code = None
    if action == "failed":
        command = plain_bounces.smtp_command(text, recipient) if recipient else None
        verdict = classify(status, diagnostic, _remote_host(block), command)
        etype, subtype, reason = EventType.BOUNCED, verdict.kind.value, verdict.reason.value
        code = verdict.status
    elif action == "delayed":
        etype, subtype = EventType.DEFERRED, None
    else:
        etype, subtype = EventType.DELIVERED, None
    shown = code or status
    said = f"(Status {status})" if status and code and status != code else None
    detail = " ".join(x for x in (shown, said, diagnostic) if x) or None
    occurred = (parts.date(parts.header(block, "Last-Attempt-Date")) or fallback_time
                or datetime.now(UTC))
    record = {k: parts.unfold(v) for k, v in block.items()}
    return Event(
        provider=Provider.DSN, event_id=derived_id("dsn", own_id, recipient, action, status),
        type=etype, subtype=subtype, reason=reason, recipient=recipient, occurred_at=occurred,
        message_id=message_id, return_path=return_path, diagnostic=clip(detail),
        payload=payload_text(record),
    )


def bounce_kind(status: str | None, diagnostic: str | None = None) -> BounceKind:
    """Hard only for a permanent failure of the mailbox or its domain, as
    :func:`mailout.feedback.bounce_rules.classify` judges the Status and the diagnostic
    together."""
    return classify(status, diagnostic).kind


# -- RFC 5965 ----------------------------------------------------------------------

def _arf_events(part: Message, msg: Message, original: Message | None,
                return_path: str | None, own_id: str, source: str) -> list[Event]:
    blocks = _blocks(part, source)
    report = blocks[0]
    feedback = clean_token(parts.header(report, "Feedback-Type"))
    if not feedback:
        raise ReportError(source, "the feedback report has no Feedback-Type")
    if feedback == "not-spam":
        return []
    message_id = parts.original_message_id(original)
    # Only Original-Rcpt-To names the complainant. The enclosed message's To: is
    # whatever the sender wrote (10,000 addresses, in a forged report): never read it.
    # Removal-Recipient: the same, in the ARF drafts' opt-out reports (Version 0.1).
    fields = (report.get_all("Original-Rcpt-To") or []) + \
        (report.get_all("Removal-Recipient") or [])
    named = (parts.recipient_address(parts.clean(str(v)))
             for v in fields[:MAX_ARF_RECIPIENTS])
    recipients = [r for r in named if r]
    if not recipients and message_id is None and return_path is None:
        raise ReportError(source, "the complaint names neither a recipient nor the "
                          "original Message-ID")
    occurred = (parts.date(parts.header(report, "Arrival-Date"))
                or parts.date(parts.header(report, "Received-Date"))
                or parts.date(parts.header(msg, "Date")) or datetime.now(UTC))
    record = {k: parts.unfold(v) for k, v in report.items()}
    return [
        Event(provider=Provider.ARF, event_id=derived_id("arf", own_id, rcpt),
              type=(EventType.AUTH_FAILURE if feedback == AUTH_FAILURE
                    else EventType.COMPLAINED), subtype=feedback[:32], recipient=rcpt,
              occurred_at=occurred, message_id=message_id, return_path=return_path,
              diagnostic=clip(f"feedback {feedback} from "
                              f"{parts.unfold(report.get('User-Agent')) or 'unknown agent'}"),
              payload=payload_text(record))
        for rcpt in recipients or [""]  # redacted: the linked row names the recipient
    ]


# -- shared ------------------------------------------------------------------------

def clean_token(value: str | None) -> str:
    """A one-word field value (``Feedback-Type``) in lower case, at most 32 characters."""
    match = re.match(r"\s*([a-z0-9._-]+)", (value or "").lower())
    return match.group(1)[:32] if match else ""


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
