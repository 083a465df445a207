"""Django ``EmailMessage`` -> mailout :class:`~mailout.outbox.Message`. Pure: no I/O.

Everything Django's SMTP backend would send is carried over: to, cc, bcc, reply_to,
the sender, extra headers, attachments (tuples or MIME parts, inline parts with a
Content-ID included) and the HTML alternative. Two headers are read and removed:
``X-Mailout-Key`` (the idempotency key) and ``X-Mailout-Queue``. Anything mailout
cannot carry faithfully raises :class:`~mailout.exceptions.InvalidMessage` rather
than being dropped: a non-HTML alternative, or two HTML ones.
"""

from __future__ import annotations

from email.mime.base import MIMEBase
from typing import Any, Final

from mailout.exceptions import InvalidMessage
from mailout.models import Attachment
from mailout.outbox import Message

KEY_HEADER: Final = "X-Mailout-Key"  # the idempotency key; not sent
QUEUE_HEADER: Final = "X-Mailout-Queue"  # the queue (default: the backend's); not sent
_OWN_HEADERS: Final = (KEY_HEADER.lower(), QUEUE_HEADER.lower())


def to_message(email: Any, *, queue: str = "default", charset: str = "utf-8") -> Message:
    """The mailout message for Django's ``email`` (an ``EmailMessage`` or subclass)."""
    headers = dict(email.extra_headers or {})
    own = {name.lower(): headers.pop(name) for name in list(headers)
           if name.lower() in _OWN_HEADERS}
    html = _html_alternative(getattr(email, "alternatives", ()) or ())
    text: str | None = email.body
    if email.content_subtype == "html":
        if html is not None:
            raise InvalidMessage("alternatives", "an HTML body and an HTML alternative")
        text, html = None, email.body
    return Message(
        to=list(email.to), cc=list(email.cc) or None, bcc=list(email.bcc) or None,
        reply_to=list(email.reply_to) or None, sender=email.from_email or None,
        subject=email.subject, text=text, html=html, headers=headers or None,
        attachments=[_attachment(a, charset) for a in email.attachments],
        key=own.get(KEY_HEADER.lower()), queue=own.get(QUEUE_HEADER.lower()) or queue,
    )


def _html_alternative(alternatives: Any) -> str | None:
    html: str | None = None
    for content, mimetype in alternatives:
        if mimetype != "text/html":
            raise InvalidMessage("alternatives", f"mailout sends text and HTML only, "
                                 f"not {mimetype!r}")
        if html is not None:
            raise InvalidMessage("alternatives", "two HTML alternatives")
        html = content if isinstance(content, str) else content.decode("utf-8")
    return html


def _attachment(item: Any, charset: str) -> Attachment:
    if isinstance(item, MIMEBase):
        return _mime_attachment(item)
    filename, content, mimetype = item
    if isinstance(content, str):
        content = content.encode(charset)
    return Attachment(filename or "attachment", content, mimetype or None)


def _mime_attachment(part: MIMEBase) -> Attachment:
    """A MIME part given to ``EmailMessage.attach()``: inline when it has a Content-ID."""
    content = part.get_payload(decode=True)
    if not isinstance(content, bytes):
        raise InvalidMessage("attachments", "a multipart attachment cannot be carried over")
    cid = part.get("Content-ID")
    inline = cid is not None or part.get_content_disposition() == "inline"
    filename = part.get_filename() or (cid or "attachment").strip("<>")
    return Attachment(filename, content, part.get_content_type(), inline=inline,
                      cid=cid.strip("<>") if cid else None)
