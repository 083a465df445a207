"""Django ``EmailMessage`` -> mailout :class:`~mailout.outbox.Message`, stored whole.

What Django's SMTP backend would send is what leaves: the message is stored as the
bytes Django itself builds (``email.message().as_bytes(linesep="\\r\\n")``, what its
SMTP backend writes after DATA), with Django's own Message-ID and Date, and the
envelope its SMTP backend would use (``sanitize_address`` then ``smtplib``'s
``quoteaddr``: IDN domains in IDNA, any address Django accepts, with or without a
domain). mailout's SMTP transport sends those bytes as they are; HTTP transports
read the fields back from them (:mod:`mailout.message.parsed`).

Two headers are read and removed before Django builds the message: ``X-Mailout-Key``
(the idempotency key) and ``X-Mailout-Queue``. A header Django refuses (a line break:
``BadHeaderError``) raises :class:`BadHeader`, which is both mailout's
``InvalidMessage`` and Django's ``BadHeaderError``.
"""

from __future__ import annotations

import copy
import smtplib
from email.utils import parseaddr
from typing import Any, Final

from django.core.mail import BadHeaderError
from django.core.mail.message import sanitize_address

from mailout.exceptions import InvalidMessage
from mailout.models import Mailbox
from mailout.outbox import Message

KEY_HEADER: Final = "X-Mailout-Key"  # the idempotency key; not sent
QUEUE_HEADER: Final = "X-Mailout-Queue"  # the queue (default: the backend's); not sent
_OWN_HEADERS: Final = (KEY_HEADER.lower(), QUEUE_HEADER.lower())


class BadHeader(InvalidMessage, BadHeaderError):
    """Django refused a header of the message (a line break in it): nothing was queued.

    An :class:`~mailout.exceptions.InvalidMessage` (``field`` is ``headers``) and
    Django's own ``BadHeaderError``, so either ``except`` catches it."""

    def __init__(self, reason: str) -> None:
        super().__init__("headers", reason)


def to_message(email: Any, *, queue: str = "default", charset: str = "utf-8") -> Message:
    """The mailout message for Django's ``email`` (an ``EmailMessage`` or subclass);
    ``charset`` is the encoding Django's SMTP backend would use for its addresses
    (``email.encoding`` or ``DEFAULT_CHARSET``)."""
    headers = dict(email.extra_headers or {})
    own = {name.lower(): str(headers.pop(name)) for name in list(headers)
           if name.lower() in _OWN_HEADERS}
    if own:
        email = copy.copy(email)  # the caller's message keeps its headers
        email.extra_headers = headers
    # The envelope first, as Django's SMTP backend works it out before the message.
    sender = envelope_address("from_email", email.from_email, charset)
    to, cc = _envelope("to", email.to, charset), _envelope("cc", email.cc, charset)
    bcc = _envelope("bcc", email.bcc, charset)
    try:
        data = email.message().as_bytes(linesep="\r\n")
    except BadHeaderError as exc:
        raise BadHeader(str(exc)) from exc
    except ValueError as exc:  # an address Django cannot write in its header
        raise InvalidMessage("headers", str(exc)) from exc
    return Message(
        to=to, cc=cc or None, bcc=bcc or None, sender=sender,
        subject=str(email.subject or ""), mime=data,
        key=own.get(KEY_HEADER.lower()), queue=own.get(QUEUE_HEADER.lower()) or queue,
    )


def envelope_address(field: str, address: Any, charset: str) -> str:
    """The address Django's SMTP backend gives ``MAIL FROM``/``RCPT TO`` for ``address``
    (``sanitize_address``, then ``smtplib``'s own parse in ``sendmail``). An address
    Django cannot parse raises InvalidMessage (a ValueError, as Django's is)."""
    try:
        return smtplib.quoteaddr(sanitize_address(address, charset))[1:-1]
    except ValueError as exc:
        raise InvalidMessage(field, str(exc)) from exc


def _envelope(field: str, addresses: Any, charset: str) -> list[Mailbox]:
    """Each non-empty address (Django's ``recipients()`` skips empty ones) as its
    envelope form, with its display name for the console and HTTP transports."""
    return [Mailbox(envelope_address(field, a, charset), parseaddr(str(a))[0])
            for a in addresses or () if a]
