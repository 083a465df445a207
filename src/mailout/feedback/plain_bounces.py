"""Bounces that are not RFC 3464 reports: the plain-text ones qmail, Exim, older
Postfix, Yahoo, AOL and many others send, read into events.

The failed addresses come from ``flufl.bounce``, GNU Mailman's bounce detectors; this
module is the only one that imports it. Its permanent failures become bounces, its
temporary ones (delay warnings) deferrals. The verdict is conservative: a bounce is
hard only when the text next to the address is a known permanent failure of the
mailbox or its domain (:mod:`mailout.feedback.bounce_rules`), else soft.

Such a bounce links like any other report: by the Message-ID of the returned original
(an attached message, or a ``Message-ID:`` line in the returned text) or by the signed
return path it was sent to; unlinked, it acts on nothing (:mod:`mailout.feedback.ingest`).
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from email.message import Message

from flufl.bounce._scan import _DETECTORS  # private: see _failures

from mailout.feedback import report_parts as parts
from mailout.feedback.bounce_rules import classify
from mailout.feedback.events import clip, derived_id, payload_text
from mailout.models import Event, EventType, Provider

log = logging.getLogger(__name__)

MAX_ADDRESSES = 50  # failed addresses read from one bounce
MAX_TEXT_CHARS = 200_000  # of the bounce's own text searched for context
CONTEXT_LINES = 4  # the address's line and the lines after it: the server's reply
_MESSAGE_ID_LINE = re.compile(r"^\s*message-id:\s*(<[^<>\s]+>)", re.IGNORECASE | re.MULTILINE)


def events(msg: Message, return_path: str | None, own_id: str) -> list[Event]:
    """One event per failed address flufl.bounce finds, or [] when it finds none."""
    temporary, permanent = _failures(msg)
    if not temporary and not permanent:
        return []
    text = _own_text(msg)
    message_id = (parts.original_message_id(parts.original_headers(msg))
                  or _message_id_in(text))
    occurred = parts.date(parts.header(msg, "Date")) or datetime.now(UTC)
    out: list[Event] = []
    for address, failed in [(a, True) for a in sorted(permanent)] + \
            [(a, False) for a in sorted(temporary - permanent)]:
        if len(out) >= MAX_ADDRESSES:
            break
        out.append(_event(address, failed, _context(text, address), message_id, return_path,
                          own_id, occurred))
    return out


def _failures(msg: Message) -> tuple[set[str], set[str]]:
    """(temporary, permanent) addresses, normalised and checked.

    flufl.bounce's ``all_failures`` runs its detectors in order until one finds
    something, but stops with the exception of the first that trips over a mangled
    message (Yale's does on a bounce without a From), so the later ones never look.
    Here each detector runs on its own, in the same order, and one that raises found
    nothing. The detector list is flufl.bounce's private ``_DETECTORS``: pinned by
    tests/unit/feedback/test_plain_bounces.py.
    """
    for detector in _DETECTORS:
        try:
            temporary, permanent = detector().process(msg)
        except Exception as exc:  # Mailman's detectors are not hardened against hostile input
            log.debug("bounce detector %s failed (%s)", detector.__name__, type(exc).__name__,
                      extra={"event": "bounce_detector_failed"})
            continue
        if temporary or permanent:
            return _addresses(temporary), _addresses(permanent)
    return set(), set()


def _addresses(found: object) -> set[str]:
    out = set()
    for raw in found if isinstance(found, set | frozenset) else ():
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        address = parts.recipient_address(text)
        if address:
            out.add(address)
    return out


def _own_text(msg: Message) -> str:
    """The bounce's own words: its text parts, not the returned original's."""
    chunks: list[str] = []
    for part in parts.walk(msg):
        kind = part.get_content_type()
        if kind in parts.ORIGINAL_TYPES:
            break
        if part.get_content_maintype() != "text":
            continue
        raw = part.get_payload(decode=True)
        if isinstance(raw, bytes):
            charset = part.get_content_charset() or "utf-8"
            try:
                chunks.append(raw.decode(charset, "replace"))
            except LookupError:
                chunks.append(raw.decode("utf-8", "replace"))
        if sum(map(len, chunks)) > MAX_TEXT_CHARS:
            break
    return parts.clean("\n".join(chunks))[:MAX_TEXT_CHARS]


def _message_id_in(text: str) -> str | None:
    match = _MESSAGE_ID_LINE.search(text)
    return parts.clean_message_id(match.group(1)) if match else None


def _context(text: str, address: str) -> str:
    """The line naming ``address`` and the few after it: where MTAs put the reply."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if address in line.lower():
            window = [x.strip() for x in lines[i:i + CONTEXT_LINES] if x.strip()]
            return " ".join(window)[:1000]
    return ""


def _event(address: str, failed: bool, context: str, message_id: str | None,
           return_path: str | None, own_id: str, occurred: datetime) -> Event:
    reason = subtype = None
    if failed:
        verdict = classify(None, context)
        etype, subtype, reason = EventType.BOUNCED, verdict.kind.value, verdict.reason.value
    else:
        etype = EventType.DEFERRED
    return Event(
        provider=Provider.TEXT_BOUNCE,
        event_id=derived_id("text", own_id, address, etype.value),
        type=etype, subtype=subtype, reason=reason, recipient=address, occurred_at=occurred,
        message_id=message_id, return_path=return_path, diagnostic=clip(context or None),
        payload=payload_text({"address": address, "failed": failed, "context": context}),
    )
