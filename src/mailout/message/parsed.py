"""The structured fields of a message stored whole, read back from its bytes.

The SMTP transport sends a whole message (Django's) as it is; an HTTP API takes
fields instead (a subject, a text and an HTML body, attachments, extra headers), and
the console shows them. They are read here with the standard library's parser, as
any mail reader would: the first text/plain and text/html bodies are the text and the
HTML, and every other leaf part (a file, a ``text/calendar`` alternative, a whole
``message/rfc822``) is an attachment, inline when it has a Content-ID or says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser
from typing import Any, Final

from mailout.models import Attachment, Mailbox

# Fields a transport writes from the envelope's own parts, never as extra headers.
_OWN: Final = frozenset({"message-id", "date", "from", "to", "cc", "bcc", "subject",
                         "mime-version", "reply-to"})
_PARSER: Final = BytesParser(policy=policy.default)


@dataclass(frozen=True)
class Parsed:
    """What a reader finds in a whole message."""

    sender_name: str
    subject: str
    text: str | None
    html: str | None
    reply_to: tuple[Mailbox, ...]
    headers: tuple[tuple[str, str], ...]
    attachments: tuple[Attachment, ...]


def parse(data: bytes) -> Parsed:
    """The fields of ``data``; ValueError (or another parser error) when they cannot
    be read."""
    message = _PARSER.parsebytes(data)
    assert isinstance(message, EmailMessage)  # policy.default makes EmailMessages
    text, html, rest = _bodies(message)
    return Parsed(
        sender_name=_mailboxes(message, "From")[0].name if message["From"] else "",
        subject=str(message.get("Subject", "")),
        text=text, html=html,
        reply_to=_mailboxes(message, "Reply-To"),
        headers=tuple((k, str(v)) for k, v in message.items()
                      if k.lower() not in _OWN and not k.lower().startswith("content-")),
        attachments=tuple(_attachment(part) for part in rest),
    )


def _mailboxes(message: EmailMessage, name: str) -> tuple[Mailbox, ...]:
    header: Any = message[name]
    if header is None:
        return ()
    return tuple(Mailbox(a.addr_spec, a.display_name) for a in header.addresses)


def _leaves(part: Message) -> list[Message]:
    """Every leaf part in order; a message/rfc822 part is a leaf (it is attached whole)."""
    if part.is_multipart() and part.get_content_type() != "message/rfc822":
        payload = part.get_payload()
        assert isinstance(payload, list)
        return [leaf for child in payload if isinstance(child, Message)
                for leaf in _leaves(child)]
    return [part]


def _bodies(message: EmailMessage) -> tuple[str | None, str | None, list[Message]]:
    text: str | None = None
    html: str | None = None
    rest: list[Message] = []
    for part in _leaves(message):
        kind = part.get_content_type()
        body = part.get_content_disposition() is None
        if body and kind == "text/plain" and text is None:
            text = _text(part)
        elif body and kind == "text/html" and html is None:
            html = _text(part)
        else:
            rest.append(part)
    if text is None and html is None:
        text = ""  # a message of attachments only: an empty text, as a reader shows it
    return text, html, rest


def _text(part: Message) -> str:
    content = part.get_content()  # type: ignore[attr-defined]  # EmailMessage's
    return str(content)


def _attachment(part: Message) -> Attachment:
    kind = part.get_content_type()
    if kind == "message/rfc822":
        inner = part.get_payload()
        first = inner[0] if isinstance(inner, list) else inner
        content = first.as_bytes() if isinstance(first, Message) else str(first).encode()
    else:
        decoded = part.get_payload(decode=True)
        content = decoded if isinstance(decoded, bytes) else b""
    cid = part.get("Content-ID")
    inline = cid is not None or part.get_content_disposition() == "inline"
    name = part.get_filename() or (str(cid).strip("<> ") if cid else "") or "attachment"
    return Attachment(name, content, kind, inline=inline,
                      cid=str(cid).strip("<> ") if cid else None)
