"""The parts of a complete message, checked at enqueue: recipients with their display
names, extra headers with List-Unsubscribe (an address header such as Reply-To
checked as the renderer will write it), attachments with their digests and the size
they take once encoded.

Each function raises :class:`~mailout.exceptions.InvalidMessage` naming the
argument (and, for attachments, the file). Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mailout.exceptions import InvalidMessage
from mailout.message import addresses, mime, validate
from mailout.models import Attachment


@dataclass(frozen=True, slots=True)
class AttachmentPart:
    """One attachment of one message as stored: its content's digest and its part."""

    sha256: str
    filename: str
    content_type: str
    inline: bool
    cid: str | None
    content: bytes = field(repr=False, compare=False)

    @property
    def size(self) -> int:
        return len(self.content)


def digest(content: bytes) -> str:
    """The hex SHA-256 that keys a content."""
    return hashlib.sha256(content).hexdigest()


def list_digest(items: Sequence[AttachmentPart]) -> str | None:
    """One digest over a message's whole attachment list (names, types, contents), for
    idempotency conflicts; None for no attachments."""
    if not items:
        return None
    lines = "\n".join(f"{a.sha256} {int(a.inline)} {a.cid or ''} {a.content_type} {a.filename}"
                      for a in items)
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def recipients(to: object, cc: object, bcc: object, reply_to: object, *,
               limit: int) -> dict[str, Any]:
    """The ``recipient`` column (the first To address) and ``addresses`` (every
    mailbox with its display name; None for a single bare To, the common case).

    At most ``limit`` distinct recipients (to, cc and bcc): more is a bulk send.
    """
    if isinstance(to, str) and cc is None and bcc is None and reply_to is None \
            and "<" not in to and '"' not in to:
        return {"recipient": addresses.address("to", to), "addresses": None}
    found = {"to": addresses.mailboxes("to", to)}
    for name, value in (("cc", cc), ("bcc", bcc), ("reply_to", reply_to)):
        if value is not None:
            found[name] = addresses.mailboxes(name, value)
    unique = {a for f in ("to", "cc", "bcc") for _, a in found.get(f, ())}
    if len(unique) > limit:
        raise InvalidMessage("to", f"{len(unique)} recipients (to, cc and bcc): the limit is "
                             f"{limit} (MAILOUT_MAX_RECIPIENTS). A message to hundreds is a "
                             "bulk send: enqueue one per recipient")
    plain = len(found) == 1 and len(found["to"]) == 1 and not found["to"][0][0]
    by_field = None if plain else {f: [list(pair) for pair in pairs]
                                   for f, pairs in found.items()}
    return {"recipient": found["to"][0][1], "addresses": by_field}


def headers(given: object, *, reply_to: bool, unsubscribe: object) -> dict[str, str] | None:
    """Extra headers, with List-Unsubscribe from ``unsubscribe``; ``reply_to``: the
    message has a reply_to argument, so no Reply-To header may come too. An address
    header is written here as the renderer will write it: one that cannot be is
    refused now, not at send time."""
    if given is None and unsubscribe is None:
        return None  # the common case
    headers = None if given is None else validate.headers(given)
    for name, value in (headers or {}).items():
        if name.lower() in addresses.ADDRESS_HEADERS:
            addresses.extra_header(name, value)  # as the worker will write it
    lowered = {name.lower() for name in headers or {}}
    if reply_to and "reply-to" in lowered:
        raise InvalidMessage("reply_to", "given twice: as reply_to and in headers")
    if unsubscribe is None:
        return headers
    extra = validate.unsubscribe(unsubscribe)
    if lowered & {name.lower() for name in extra}:
        raise InvalidMessage("unsubscribe", "given twice: as unsubscribe and in headers")
    return {**(headers or {}), **extra}


def attachments(items: object, *, max_bytes: int) -> list[AttachmentPart]:
    """Checked attachments with their content digests; errors name the file."""
    if isinstance(items, Attachment) or not isinstance(items, Sequence):
        raise InvalidMessage("attachments", "must be a list of mailout.Attachment")
    parts: list[AttachmentPart] = []
    digests: dict[int, str] = {}  # the same bytes object on many messages: hashed once
    cids: set[str] = set()
    for item in items:
        checked = validate.attachment(item, max_bytes=max_bytes)
        if checked.cid is not None:
            if checked.cid in cids:
                raise InvalidMessage("attachments", f"{checked.filename!r}: cid "
                                     f"{checked.cid!r} is used twice")
            cids.add(checked.cid)
        sha = digests.get(id(checked.content)) or digest(checked.content)
        digests[id(checked.content)] = sha
        parts.append(AttachmentPart(sha, checked.filename, checked.content_type,
                                               checked.inline, checked.cid, checked.content))
    return parts


def check_size(content: Mapping[str, object], params_size: int,
                parts: Sequence[AttachmentPart], limit: int) -> None:
    """Refuse a message whose attachments, once encoded, take it past ``limit``."""
    encoded = sum(mime.base64_size(p.size) for p in parts)
    try:
        validate.size(content, limit, extra=params_size + encoded)
    except InvalidMessage as exc:
        files = ", ".join(f"{p.filename!r} ({p.size} bytes)"
                          for p in sorted(parts, key=lambda p: -p.size))
        raise InvalidMessage("attachments", f"{exc.reason} (MAILOUT_MAX_MESSAGE_BYTES) with "
                             f"attachments encoded as base64: {files}") from None
