"""Prose bounces that flufl.bounce's detectors do not know: the failed recipients read
from what the bounce's own text says about them.

MTAs and providers word their bounces in many ways (qmail, Exim, Postfix without a
delivery status, Lotus Notes, mobile carriers, filters, webmail services), but they say
the same things: a sentence that introduces the failed recipients, the addresses, and
next to each the remote server's reply. This reader looks for exactly that, in the
bounce's own words only (its text before the returned original):

- an address on a line that states a failure (or next to one: the reason is often
  written on the line above or the reply on the line below), or within a few lines
  after a line that introduces failed recipients (:data:`FAILURE`, :data:`INTRODUCES`);
- a delivery status pasted into the text (``Final-Recipient: rfc822; x``) or a
  summary's ``RCPT TO: x`` line;
- never an address of the bounce's own headers (the reporting system, our return path),
  of the original's sender, a postmaster or mailer-daemon, one in a link, or one on a
  line that only says whom to contact;
- when the returned original names its recipients, the named addresses among them are
  preferred (the others are a help desk, a list, an alias);
- when the text names no address but states a failure and the returned original has
  exactly one recipient, that recipient.

:mod:`mailout.feedback.plain_bounces` makes the events. The verdict is conservative:
the text next to the address goes through
:func:`mailout.feedback.bounce_rules.classify`, which says hard only for a known
permanent failure of the mailbox or its domain; anything else is soft, and a warning
that the MTA keeps trying is a deferral. Reading an address proves nothing by itself:
ingestion acts only on a report linked to our message (Message-ID or signed return
path) that names one of that message's recipients (:mod:`mailout.feedback.ingest`).
"""

from __future__ import annotations

import email
import email.utils
import re
from dataclasses import dataclass
from email.message import Message

from mailout.feedback import report_parts as parts

MAX_ADDRESSES = 50  # failed addresses read from one bounce
LINES_AFTER_INTRO = 6  # lines after "the following recipients failed" that may list them
_ADDRESS = re.compile(r"[^\s<>()\[\]{}\"':;,=/]+@[A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9]")
_URL = re.compile(r"(?:https?|ftp)://\S+", re.IGNORECASE)
# A line stating that delivery failed, or carrying the server's refusal.
FAILURE = re.compile(
    r"\b[45]\d\d[\s-]|\b[45]\.\d{1,3}\.\d{1,3}\b|unknown|not found|no such|reject|refus|"
    r"\bfail|error|invalid|undeliver|unable|could ?not|couldn't|can ?not|can't|\bfull\b|"
    r"quota|denied|blocked|disabled|suspended|(?:does|did) not exist|doesn't exist|"
    r"expired|timed? ?out|deferred|permanent|fatal|bounced|not (?:be )?delivered|"
    r"wasn't delivered|returned|giving up|失敗|できません|見つかりません|存在しません|"
    r"エラー|届きません", re.IGNORECASE)
# A line announcing the list of failed recipients that follows it.
INTRODUCES = re.compile(
    r"following (?:recipients?|address(?:es)?|destinations?|users?)|"
    r"(?:recipients?|address(?:es)?) (?:had|returned|failed|below)|delivery has failed|"
    r"failed to (?:deliver|send)|not (?:be )?delivered to|unable to deliver|"
    r"failure reasons|invalid recipients?|unknown recipients?|送信に失敗|宛先", re.IGNORECASE)
# Lines that only tell whom to ask for help: their address is nobody's failure.
CONTACT = re.compile(r"contact|assistance|send (?:e-?)?mail to|write to|questions?|"
                     r"help ?desk|support|連絡|問い合わせ", re.IGNORECASE)
# Where a returned original starts inside a text part (single-part bounces).
_ORIGINAL_STARTS = re.compile(
    r"^\s*(?:-+\s*)?(?:(?:unsent|returned|original|undelivered) message|below this line|"
    r"(?:this is |below is )?a copy of (?:the|your)|original message follows|"
    r"message headers? follow)"
    r"|^(?:received|return-path|message-id|dkim-signature):", re.IGNORECASE)
_HEADER_LINE = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]")
_FIRST_HEADERS = frozenset({"from", "to", "subject", "date", "cc", "mime-version"})
_NOBODY = re.compile(r"^(?:postmaster|mailer-daemon|mail-daemon|mailerdaemon|"
                     r"double-bounce|abuse|hostmaster|webmaster|root)$", re.IGNORECASE)
_STILL_TRYING = re.compile(r"will (?:keep|continue) (?:trying|to try)|still trying|"
                           r"will be retried|not yet been delivered|delivery (?:is )?delayed|"
                           r"warning: message .*delayed", re.IGNORECASE)
# A delivery status pasted into the text, or a summary's envelope recipient
# ("RCPT TO: x@y" under "Message details"): the report's own statement of the recipient.
_RECIPIENT_FIELD = re.compile(r"^\s*(?:(?:final|original)-recipient:\s*rfc822;|rcpt to:)"
                              r"\s*<?([^\s<>]+)", re.IGNORECASE)
_RECEIVED_FOR = re.compile(r"\bfor\s+<([^<>\s]+@[^<>\s]+)>", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Failed:
    """One recipient the text names as failed, and what it says about it."""

    address: str
    said: str  # the lines naming it (or, for the original's recipient, the failure lines)
    trying: bool  # the MTA says it keeps trying: a deferral, not a bounce


def failed_recipients(msg: Message, text: str, original_recipient: bool = True
                      ) -> list[Failed]:
    """The recipients the bounce's ``text`` (its own words, already decoded) names as
    failed, or [] when it names none. ``original_recipient``: whether a text that
    states a failure but names nobody stands for the returned original's only
    recipient (not where a delivery status named a recipient that is no address)."""
    own, rest = split_original(text)
    original = parts.original_headers(msg)
    inline = _inline_original(rest) if original is None else None
    senders = _excluded(msg, original or inline)
    recipients = _original_recipients(original or inline, rest)
    lines = [_URL.sub(" ", line) for line in own.splitlines()]
    named = _named(lines, senders)
    chosen = [a for a in named if a in recipients] or named
    fallback = (original_recipient and not chosen and len(recipients) == 1
                and FAILURE.search(own) is not None)
    if fallback:
        chosen = list(recipients)
    trying = _STILL_TRYING.search(own) is not None
    return [Failed(a, _failure_lines(lines) if fallback else _statement(lines, a), trying)
            for a in chosen[:MAX_ADDRESSES]]


def split_original(text: str) -> tuple[str, str]:
    """The bounce's own words, and the returned original that follows them in the
    same text (a line such as "----- Unsent message follows -----", or the original's
    first header lines), or "" when there is none."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if _ORIGINAL_STARTS.search(line) or _starts_headers(lines, i):
            return "\n".join(lines[:i]), "\n".join(lines[i:])
    return text, ""


def _starts_headers(lines: list[str], i: int) -> bool:
    """Three header lines in a row, two of them a message's own (From, To, Subject...):
    an original's headers, not report fields (``Action: failed``) nor a bounce that
    quotes the subject and date of the message it returns."""
    found = [_HEADER_LINE.match(line) for line in lines[i:i + 3]]
    names = [m.group(1).lower() for m in found if m is not None]
    return len(names) == 3 and len(set(names) & _FIRST_HEADERS) >= 2


def _inline_original(rest: str) -> Message | None:
    """The headers of an original returned as text after the bounce's words."""
    body = rest.split("\n", 1)[1] if rest and not _HEADER_LINE.match(rest) else rest
    body = body.lstrip("\n")
    if not _HEADER_LINE.match(body):
        return None
    head = body.split("\n\n", 1)[0]
    return email.message_from_string(head + "\n")


def _addresses_of(msg: Message | None, *names: str) -> set[str]:
    found: set[str] = set()
    if msg is None:
        return found
    for name in names:
        for value in msg.get_all(name) or []:
            for _, raw in email.utils.getaddresses([parts.clean(str(value))]):
                address = parts.recipient_address(raw)
                if address:
                    found.add(address)
    return found


def _excluded(msg: Message, original: Message | None) -> set[str]:
    """Addresses that are never a failed recipient: the bounce's own (the reporting
    system, the return path it went to) and the original's sender."""
    return (_addresses_of(msg, "From", "To", "Cc", "Reply-To", "Sender", "Return-Path",
                          "X-Original-To", "Delivered-To")
            | _addresses_of(original, "From", "Sender", "Return-Path", "Reply-To"))


def _original_recipients(original: Message | None, rest: str) -> list[str]:
    """The recipients the returned original names: To, Cc, or a Received ``for <x>``."""
    found = sorted(_addresses_of(original, "To", "Cc"))
    if not found:
        found = sorted({a for m in _RECEIVED_FOR.finditer(rest)
                        if (a := parts.recipient_address(m.group(1)))})
    return found


def _named(lines: list[str], excluded: set[str]) -> list[str]:
    """Addresses the text names as failed, in order (see the module docstring)."""
    out: list[str] = []
    since_intro = LINES_AFTER_INTRO + 1
    for i, line in enumerate(lines):
        if len(out) >= MAX_ADDRESSES:
            break
        if INTRODUCES.search(line):
            since_intro = 0
        elif line.strip():
            since_intro += 1
        field = _RECIPIENT_FIELD.match(line)
        if field:
            address = parts.recipient_address(field.group(1))
            if address and address not in out and not _nobody(address):
                out.append(address)
            continue
        # The reply often continues on the next line: "<x@y>: host mx said:" / "550 ...".
        failing = FAILURE.search(line) is not None or any(
            FAILURE.search(x) is not None and not _ADDRESS.search(x)
            for x in _neighbours(lines, i))
        if CONTACT.search(line) and not FAILURE.search(line):
            continue
        if not (failing or since_intro <= LINES_AFTER_INTRO):
            continue
        for raw in _ADDRESS.findall(line):
            address = parts.recipient_address(raw.strip("."))
            if address and address not in excluded and address not in out \
                    and not _nobody(address):
                out.append(address)
    return out


def _neighbours(lines: list[str], i: int) -> list[str]:
    """The nearest non-blank line before line ``i`` and the line after it: where a
    bounce puts the reason for the address it lists ("The account is disabled." /
    "<x@y>:" / "550 ...")."""
    before = next((x for x in reversed(lines[max(0, i - 3):i]) if x.strip()), "")
    return [before, lines[i + 1] if i + 1 < len(lines) else ""]


def _nobody(address: str) -> bool:
    return _NOBODY.match(address.partition("@")[0]) is not None


def _statement(lines: list[str], address: str) -> str:
    """The line naming ``address`` and up to two after it (where the reply is), up to
    a blank line or a line naming another address; when they state no failure, the
    line before it too (a reason written above a list of addresses)."""
    for i, line in enumerate(lines):
        if address in line.lower():
            window = [line.strip()]
            for after in lines[i + 1:i + 3]:
                if not after.strip() or _names_another(after, address):
                    break
                window.append(after.strip())
            before = _neighbours(lines, i)[0]
            if not FAILURE.search(" ".join(window)) and not _names_another(before, address):
                window.insert(0, before.strip())
            return " ".join(w for w in window if w)[:1000]
    return ""


def _names_another(line: str, address: str) -> bool:
    return bool({a.lower() for a in _ADDRESS.findall(line)} - {address})


def _failure_lines(lines: list[str]) -> str:
    """What a bounce that names no address says: its lines stating a failure."""
    return " ".join(x.strip() for x in lines if FAILURE.search(x))[:1000]
