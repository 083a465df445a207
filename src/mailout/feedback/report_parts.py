"""Reading the parts of a bounce or complaint message safely: a bounded walk over its
MIME tree, header values cleaned for storage, addresses checked, the original
message's Message-ID and the return path the report was sent to.

Everything here expects hostile input: a report may nest multiparts thousands deep,
carry NULs or bytes that are not UTF-8, or put a pipe command, a path or a source
route where an address belongs. Nothing here raises for such input: a part past the
limits is not visited, a value is cleaned or comes back empty.
"""

from __future__ import annotations

import email
import email.utils
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from email.message import Message
from email.utils import parsedate_to_datetime

from mailout.feedback.events import normalize_message_id
from mailout.message.addresses import normalize_address

MAX_PARTS = 500  # MIME parts visited in one report
MAX_DEPTH = 12  # nesting levels visited (real bounces use 3 or 4)
ORIGINAL_TYPES = ("message/rfc822", "message/global", "text/rfc822-headers",
                  "message/rfc822-headers", "message/global-headers")
_VERP_HEADERS = ("X-Original-To", "Delivered-To", "Envelope-To", "To")
_UNSAFE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_LOCAL = r"[^\s\x00-\x1f\x7f@<>()\[\],;:\"\\|/][^\s\x00-\x1f\x7f@<>()\[\],;:\"\\]*"
_DOMAIN = r"(?:[^\W_](?:[\w-]*[^\W_])?\.)+[^\W\d_][\w-]*[^\W_]|\[[0-9.:a-f]+\]"
# A quoted local part ("neko..nyaan"@example.org, RFC 5322 3.4.1): the address as the
# sender wrote it, so it matches the outbox row's; never a pipe or a path inside.
_QUOTED_LOCAL = r'"[^"\\\s\x00-\x1f\x7f|/][^"\\\x00-\x1f\x7f]*"'
_ADDR_SPEC = re.compile(rf"(?:{_LOCAL}|{_QUOTED_LOCAL})@(?:{_DOMAIN})", re.IGNORECASE)


def walk(msg: Message) -> Iterator[Message]:
    """Every part of ``msg`` depth-first in document order, at most :data:`MAX_PARTS`
    parts and :data:`MAX_DEPTH` levels (``Message.walk`` recurses without a bound)."""
    stack: list[tuple[Message, int]] = [(msg, 0)]
    seen = 0
    while stack and seen < MAX_PARTS:
        part, depth = stack.pop()
        seen += 1
        yield part
        payload = part.get_payload()
        if depth < MAX_DEPTH and isinstance(payload, list):
            stack.extend((p, depth + 1) for p in reversed(payload) if isinstance(p, Message))


def clean(text: str) -> str:
    """``text`` storable anywhere: undecodable bytes (surrogates) and control
    characters other than whitespace replaced."""
    fixed = text.encode("utf-8", "replace").decode("utf-8")
    return _UNSAFE.sub(" ", fixed)


def header(msg: Message, name: str) -> str | None:
    """A header as clean text, or None. An undecodable one comes back as a Header
    object; a malformed one can raise inside the email package: both are text here.
    Raw ISO-2022-JP (Japanese Domino and others write it in ``Diagnostic-Code``) is
    decoded: its escape sequences would otherwise be cleaned into noise."""
    try:
        value = msg.get(name)
    except (ValueError, TypeError, AttributeError, LookupError, IndexError):
        return None
    return None if value is None else clean(_iso_2022_jp(str(value)))


def _iso_2022_jp(value: str) -> str:
    if "\x1b$" not in value:
        return value
    try:
        return value.encode("ascii").decode("iso-2022-jp")
    except UnicodeError:
        return value


# A field line of a delivery-status block; any other line continues the field before
# it, indented or not (MessageLabs writes a multi-line reply's "550-..." lines flush
# left, which the email package takes for the end of the fields).
_FIELD = re.compile(r"([A-Za-z][A-Za-z0-9-]*)[ \t]*:[ \t]*(.*)")
_RECIPIENT_FIELDS = ("final-recipient", "original-recipient")


def status_fields(block: Message) -> list[tuple[str, str]]:
    """The fields of one parsed delivery-status block, read leniently: lines the
    email package left in the block's body are fields or continuations too."""
    lines = [f"{name}: {value}" for name, value in block.raw_items()]
    body = block.get_payload()
    if isinstance(body, str):
        lines.extend(body.splitlines())
    fields: list[tuple[str, str]] = []
    for line in "\n".join(lines).splitlines():
        found = _FIELD.fullmatch(line.rstrip())
        if found and not line[:1].isspace():
            fields.append((found.group(1), found.group(2)))
        elif fields and line.strip():
            name, value = fields[-1]
            fields[-1] = (name, f"{value}\n {line.strip()}")
    return fields


def recipient_groups(fields: list[tuple[str, str]], limit: int) -> list[Message]:
    """``fields`` as blocks, one per recipient, at most ``limit``: some MTAs (AOL)
    write several recipients' fields, and the per-message ones, in one block with no
    blank line. A recipient field that the current block already has starts a new one."""
    groups: list[list[tuple[str, str]]] = [[]]
    seen: set[str] = set()
    for name, value in fields:
        key = name.lower()
        if key in _RECIPIENT_FIELDS and key in seen:
            if len(groups) >= limit:
                break
            groups.append([])
            seen = set()
        groups[-1].append((name, value))
        seen.add(key)
    out = []
    for group in groups:
        block = Message()
        for name, value in group:
            block[name] = value
        out.append(block)
    return out


def unfold(value: object) -> str | None:
    if value is None:
        return None
    return re.sub(r"\s*\r?\n\s*", " ", clean(str(value))).strip()


def date(value: object) -> datetime | None:
    if not value:
        return None
    try:
        moment = parsedate_to_datetime(str(value).strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def is_addr_spec(address: str) -> bool:
    """A plausible ``local@domain.tld``: no pipe command, path, source route, bare host
    or placeholder such as ``undisclosed-recipients``."""
    return len(address) <= 320 and _ADDR_SPEC.fullmatch(address) is not None


def recipient_address(field: str | None) -> str:
    """The address of a ``Final-Recipient``-style field (``rfc822; user@example.com``),
    normalised, or "" when it is not an Internet address (X.400, a program, junk)."""
    if not field:
        return ""
    kind, sep, value = field.partition(";")
    if not sep:
        value = kind
    elif kind.strip().lower() not in ("rfc822", "utf-8", ""):
        return ""
    address = normalize_address(value)
    if address.startswith("@") and ":" in address:
        address = address.rsplit(":", 1)[1]  # a source route: @relay.example:user@host
    return address if is_addr_spec(address) else ""


def original_headers(msg: Message) -> Message | None:
    """The enclosed original message, or its headers, when the report has them."""
    for part in walk(msg):
        if part is msg or part.get_content_type() not in ORIGINAL_TYPES:
            continue
        payload = part.get_payload()
        if isinstance(payload, list) and payload and isinstance(payload[0], Message):
            inner = payload[0]
            body = inner.get_payload()
            if not inner.keys() and isinstance(body, str) and body.strip():
                # A blank line before the headers: they were read as the body.
                return email.message_from_string(body.lstrip())
            return inner
        raw = part.get_payload(decode=True)
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(payload)
        return email.message_from_string(text.lstrip())
    return None


def original_message_id(original: Message | None) -> str | None:
    if original is None:
        return None
    return clean_message_id(header(original, "Message-ID"))


def clean_message_id(raw: str | None) -> str | None:
    """A Message-ID as stored, or None when it is not one (spaces, controls)."""
    found = normalize_message_id(raw)
    return found if found and not _UNSAFE.search(found) and len(found) <= 255 else None


def return_path(msg: Message, original: Message | None) -> str | None:
    """Where the report was sent: the address a VERP return path would show up as."""
    for name in _VERP_HEADERS:
        value = header(msg, name)
        if value and "+" in value:
            found = normalize_address(email.utils.parseaddr(value)[1] or value)
            return found if is_addr_spec(found) else None
    value = header(original, "Return-Path") if original is not None else None
    if value:
        found = normalize_address(value)
        return found if is_addr_spec(found) else None
    return None
