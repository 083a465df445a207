"""Checks for a message stored whole: bytes the enqueuing code built itself (Django's
``EmailMessage.message()``), which the SMTP transport sends as they are.

mailout does not re-encode such a message, so it checks what it would otherwise
have written itself: the header block is well formed (CRLF line ends, no line break,
NUL or other control character inside a field, names of printable ASCII, no line over
998 octets), it has exactly one Message-ID (the row's), it carries no trace or
signature field (``Received``, ``DKIM-Signature``...: servers and signers add those),
and the envelope addresses are one token each, so that no SMTP command can be
smuggled in. What the enqueuing code's own rules allowed (an empty subject, an
address without a domain) is its business, as it would be over its own SMTP.

Each function raises :class:`~mailout.exceptions.InvalidMessage` naming the field.
Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from mailout.exceptions import InvalidMessage
from mailout.message import validate
from mailout.models import Mailbox

MAX_LINE: Final = 998  # RFC 5322 2.1.1, CRLF excluded
ADDRESS_MAX: Final = 320  # the recipient and sender columns
MESSAGE_ID_MAX: Final = 255  # the message_id column
_FIELD = re.compile(rb"([!-9;-~]+):")  # a field name (printable ASCII but ":") and ":"
# Inside a header line: every C0 control but tab, and DEL. CR and LF appear only as
# the CRLF that ends a line, which the split removed.
_BAD_IN_HEADER = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
# What an envelope address may not hold: whitespace and controls (they would end or
# split an SMTP command), and the angle brackets that delimit it.
_NOT_IN_ADDRESS = re.compile(r"[\x00-\x20\x7f\x85\u2028\u2029<>]")
_MESSAGE_ID = re.compile(r"<[!-;=?-~]+>")  # printable ASCII between <>, no <> inside


def envelope_address(field: str, value: object) -> str:
    """One envelope address (``MAIL FROM``/``RCPT TO``), as the enqueuing code's SMTP
    would send it: any single token, with or without a domain."""
    raw = validate.text(field, value, header=True, allow_empty=False)
    if _NOT_IN_ADDRESS.search(raw):
        raise InvalidMessage(field, f"{raw[:80]!r} is not one envelope address (it has "
                             "whitespace, a control character or <>)")
    if len(raw) > ADDRESS_MAX:
        raise InvalidMessage(field, f"is {len(raw)} characters long, the limit is "
                             f"{ADDRESS_MAX}")
    return raw


def _mailboxes(field: str, value: object) -> list[tuple[str, str]]:
    """``value`` (None, one address or a list of addresses or Mailboxes) as
    (display name, envelope address) pairs."""
    if value is None:
        return []
    if isinstance(value, str | Mailbox):
        value = [value]
    if not isinstance(value, list | tuple):
        raise InvalidMessage(field, "must be an address or a list of addresses")
    items: Sequence[Any] = value
    pairs = []
    for item in items:
        if isinstance(item, Mailbox):
            name = validate.text(field, item.name, header=True)
            pairs.append((name, envelope_address(field, item.address)))
        else:
            pairs.append(("", envelope_address(field, item)))
    return pairs


def recipients(to: object, cc: object, bcc: object, *, limit: int) -> dict[str, Any]:
    """The ``recipient`` column (the first envelope recipient) and ``addresses`` (the
    envelope recipients by field, with display names for the console and the HTTP
    transports; None for one bare To). At most ``limit`` distinct recipients."""
    found = {"to": _mailboxes("to", to), "cc": _mailboxes("cc", cc),
             "bcc": _mailboxes("bcc", bcc)}
    every = [address for pairs in found.values() for _, address in pairs]
    if not every:
        raise InvalidMessage("to", "a message needs at least one recipient")
    if len(set(every)) > limit:
        raise InvalidMessage("to", f"{len(set(every))} recipients (to, cc and bcc): the "
                             f"limit is {limit} (MAILOUT_MAX_RECIPIENTS)")
    if len(every) == 1 and found["to"] and not found["to"][0][0]:
        return {"recipient": every[0], "addresses": None}
    return {"recipient": every[0],
            "addresses": {f: [list(p) for p in pairs] for f, pairs in found.items() if pairs}}


def message_id(mime: object, *, max_bytes: int) -> str:
    """Check the whole message ``mime`` and return its Message-ID (with its <>)."""
    if not isinstance(mime, bytes):
        raise InvalidMessage("mime", f"must be bytes, not {type(mime).__name__}")
    if len(mime) > max_bytes:
        raise InvalidMessage("size", f"the message is {len(mime)} bytes, the limit is "
                             f"{max_bytes} (MAILOUT_MAX_MESSAGE_BYTES)")
    head, blank, _ = mime.partition(b"\r\n\r\n")
    if not blank:
        raise InvalidMessage("mime", "has no header block ending in an empty CRLF line")
    found: list[str] = []
    name = b""
    for line in head.split(b"\r\n"):
        if _BAD_IN_HEADER.search(line) or len(line) > MAX_LINE:
            raise InvalidMessage("mime", f"header line after {name.decode()!r} has a line "
                                 "break, a control character or more than 998 octets")
        if line[:1] in (b" ", b"\t"):
            if not name:
                raise InvalidMessage("mime", "the header block starts with a continuation")
            if name.lower() == b"message-id":
                found[-1] += line.decode("ascii", "replace")
            continue
        match = _FIELD.match(line)
        if match is None:
            raise InvalidMessage("mime", f"malformed header line after {name.decode()!r}")
        name = match.group(1)
        lowered = name.decode().lower()
        if lowered in validate.TRACE_HEADERS or lowered.startswith("resent-"):
            raise InvalidMessage("mime", f"{name.decode()!r} is a trace, resent or signature "
                                 "field: servers and signers add those")
        if lowered == "message-id":
            found.append(line[match.end():].decode("ascii", "replace"))
    if len(found) != 1:
        raise InvalidMessage("mime", f"has {len(found)} Message-ID fields, not one")
    value = found[0].strip()
    if not _MESSAGE_ID.fullmatch(value) or len(value) > MESSAGE_ID_MAX:
        raise InvalidMessage("mime", f"Message-ID {value[:80]!r} is not <printable ASCII> "
                             f"of at most {MESSAGE_ID_MAX} characters")
    return value
