"""Every use of aiosmtplib's private API, in one place, for the supported range only.

Supported: aiosmtplib >= 5.1.3, < 6 (:data:`SUPPORTED`; the bound in pyproject.toml).
tests/unit/transports/smtp/test_aiosmtplib_compat.py checks that the installed version
is in that range and that each name below still exists with the shape used here; on a
version that changed one, it fails naming the attribute, before any send misbehaves.

mailout writes MAIL, RCPT, DATA and the content itself (aiosmtplib's ``sendmail``
sends one command at a time and re-parses each address, and its ``data()`` hides the
stage a failure came at: :mod:`mailout.transports.smtp.transaction`), but it reads
the replies with aiosmtplib's own parser on aiosmtplib's ``SMTPProtocol``. That needs:

* ``SMTPProtocol._response_pending`` (:func:`mark_reply_due`): aiosmtplib drops data
  that arrives while it is False (an idle connection's "421 timeout" notice), and its
  ``execute_command`` sets it before each write. Commands written here must set it
  too, or the reply to them is dropped and its read waits out the deadline.
* ``SMTPProtocol._read_response_from_buffer`` and ``._buffer``
  (:func:`buffered_reply`, :func:`unread`): the parser takes one reply per read and
  keeps the rest of what arrived; the later replies of a pipelined group (RFC 2920)
  can already be there, and are taken without waiting for more data.
* ``SMTPProtocol._response_waiter`` and ``MAX_RESPONSE_LENGTH`` (:class:`RepliesKept`,
  the protocol wrapped in front of aiosmtplib's): to keep data that arrives while a
  parsed reply awaits pickup, which aiosmtplib would drop (to it, out of turn).
* ``FlowControlMixin._drain_helper`` (:func:`drain`): the transport's write buffer
  drained, so that a large message goes out in pieces, not as a second copy.

Why 5.1.3 at least: ``MAX_RESPONSE_LENGTH`` first came in 5.1.2, and
``_response_pending`` (data while no reply is due is dropped, not parsed into the next
command's reply) in 5.1.3; before it an idle connection's unasked "421" became the
reply to the next MAIL. Why below 6: a major release may change any of these, and the
contract suite (tests/integration/transports), which runs every outcome through them,
pipelined and not, has only run on 5.1.
"""

from __future__ import annotations

import asyncio
from typing import Final

import aiosmtplib
from aiosmtplib import SMTPResponse
from aiosmtplib.errors import SMTPServerDisconnected
from aiosmtplib.protocol import MAX_RESPONSE_LENGTH, SMTPProtocol

SUPPORTED: Final = ((5, 1, 3), (6,))  # lowest supported, first unsupported


def mark_reply_due(protocol: SMTPProtocol) -> None:
    """A command is about to be written: its reply must be parsed, not dropped (as
    aiosmtplib's ``execute_command`` does before its write)."""
    protocol._response_pending = True


def buffered_reply(protocol: SMTPProtocol) -> SMTPResponse | None:
    """The next reply if it already arrived whole (behind an earlier one), else None.

    Marks a reply as due, so that the rest of it, if it is still on its way, is parsed.
    Raises aiosmtplib's SMTPResponseException on a malformed reply, as its read would."""
    protocol._response_pending = True
    return protocol._read_response_from_buffer()


def unread(protocol: SMTPProtocol) -> int:
    """How many bytes arrived and were kept that no read has taken yet."""
    return len(protocol._buffer)


async def drain(protocol: SMTPProtocol) -> None:
    """Wait until the transport's write buffer is below its high-water mark.
    ConnectionResetError if the connection was lost (aiosmtplib's flow control)."""
    await protocol._drain_helper()


def protocol_of(smtp: aiosmtplib.SMTP) -> SMTPProtocol:
    """``smtp``'s protocol, if connected (SMTPServerDisconnected otherwise)."""
    protocol = smtp.protocol
    if protocol is None or not protocol.is_connected:
        raise SMTPServerDisconnected("Connection lost")
    return protocol


class RepliesKept(asyncio.Protocol):
    """Between the transport and aiosmtplib's protocol: data that arrives while a
    parsed reply awaits pickup is kept for the next read instead of dropped.

    aiosmtplib sends one command at a time, so to it such data is out of turn. mailout
    pipelines: the reply to RCPT can arrive in the moment between the MAIL reply's
    arrival and its reader's turn on the event loop, and would be lost (the read of it
    would then wait out the deadline). Data while no reply is due (an idle connection's
    "421 timeout" notice) is still dropped, as aiosmtplib does. Every other event goes
    to aiosmtplib's protocol unchanged. (A wrapper, not a subclass swapped in: changing
    the class of a live protocol slowed every attribute access on it.)
    """

    def __init__(self, protocol: SMTPProtocol) -> None:
        self.protocol = protocol
        self._parse = protocol.data_received

    def data_received(self, data: bytes) -> None:
        protocol = self.protocol
        waiter = protocol._response_waiter
        if waiter is None or not waiter.done() or not protocol._response_pending:
            self._parse(data)
            return
        protocol._buffer.extend(data)  # behind the parsed reply: the next read's
        if len(protocol._buffer) > MAX_RESPONSE_LENGTH and protocol.transport is not None:
            protocol.transport.close()  # no sane server sends this much unasked

    def eof_received(self) -> bool | None:
        return self.protocol.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.protocol.connection_lost(exc)

    def pause_writing(self) -> None:
        self.protocol.pause_writing()

    def resume_writing(self) -> None:
        self.protocol.resume_writing()


def keep_replies(smtp: aiosmtplib.SMTP) -> None:
    """Put :class:`RepliesKept` in front of ``smtp``'s protocol (connected, before any
    command is pipelined; again after STARTTLS, which gives the protocol a new
    transport). Both the stdlib's and uvloop's transports take a new protocol."""
    protocol = protocol_of(smtp)
    if protocol.transport is not None:
        protocol.transport.set_protocol(RepliesKept(protocol))
