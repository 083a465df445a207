"""A rendered message as a transport receives it: its structured parts and, on demand,
its wire form.

The renderer (:mod:`mailout.message.render`) builds envelopes; every transport's
``send`` takes one (:mod:`mailout.transports.base`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from mailout.models import Attachment, Mailbox


@dataclass(frozen=True)
class Envelope:
    """A rendered message: its structured parts and, on demand, its wire form.

    Everything a provider API needs is here as fields, so an HTTP transport never
    parses MIME. ``wire`` is the full RFC 5322 message (CRLF line endings), built
    on first use by ``wire_builder`` and kept: SMTP pays for it, HTTP APIs that
    take fields never do. A transport that needs canonical line ends makes them,
    unless ``wire_crlf_only`` vouches for them. ``headers`` are the extra headers, in order, already
    checked by the renderer; they never include Bcc.
    """

    message_id: str  # with angle brackets, as in the Message-ID header
    idempotency_key: str
    sender: Mailbox  # the From header
    to: tuple[Mailbox, ...]
    subject: str
    text: str | None
    html: str | None
    cc: tuple[Mailbox, ...] = ()
    bcc: tuple[Mailbox, ...] = ()
    reply_to: tuple[Mailbox, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    attachments: tuple[Attachment, ...] = ()
    return_path: str | None = None  # the envelope sender, when not the From address
    # When set, only these envelope recipients get this send: a retry of the recipients
    # a provider deferred, while those that accepted before are not sent it again. The
    # headers still name everyone (it is the same message). Empty means all.
    deliver_to: tuple[str, ...] = ()
    wire_builder: Callable[[], bytes] | None = field(default=None, repr=False, compare=False)
    # True when ``wire_builder`` guarantees CRLF line ends only, ending in one (mailout's
    # MIME builder does, by construction): the SMTP transport then writes the wire form
    # without scanning it three times to normalize them. False: any line ends.
    wire_crlf_only: bool = field(default=False, repr=False, compare=False)

    @property
    def mail_from(self) -> str:
        """The envelope sender (SMTP ``MAIL FROM``): the return path, else From's address."""
        return self.return_path or self.sender.address

    @property
    def recipients(self) -> tuple[str, ...]:
        """The envelope recipients of this send, bare addresses, first occurrence kept:
        ``deliver_to`` when set, else every address of to, cc and bcc."""
        if self.deliver_to:
            return self.deliver_to
        if not self.cc and not self.bcc and len(self.to) == 1:
            return (self.to[0].address,)  # the common case, without building a dict
        return tuple(dict.fromkeys(m.address for m in (*self.to, *self.cc, *self.bcc)))

    @cached_property
    def wire(self) -> bytes:
        """The RFC 5322 message. Raises ValueError when the envelope has no wire form."""
        if self.wire_builder is None:
            raise ValueError("this envelope was built without a wire form")
        return self.wire_builder()
