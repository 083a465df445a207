"""One mail transaction on an open SMTP connection: MAIL, RCPT, DATA and the content.

:mod:`mailout.transports.smtp.client` opens, pools and closes connections; what it
does on a connection once it is ready to send is here. The replies are read with
aiosmtplib's protocol parser, but the commands are written by hand (see
:func:`transaction`), so each step records in :class:`AttemptState` the
:class:`~mailout.transports.smtp.outcome.Stage` it reached; a failure there is
reported at that stage.

Choices worth knowing:

* MAIL, RCPT and DATA go out in one write when the server offers PIPELINING
  (RFC 2920), and one at a time otherwise. A refused RCPT does not end the
  transaction while another recipient was accepted: the message goes to the
  accepted ones, and every RCPT reply is kept in the outcome (``rcpt_replies``).
  Otherwise the outcome names the stage of the negative reply; nothing of the
  content has left at that point.
* The DATA phase is driven by hand (aiosmtplib's ``data()`` hides where it
  failed): ``Stage.DATA`` covers the DATA command up to the 354 and also a
  server found to have closed, or said anything, right after the 354, before any
  content was written (:func:`server_spoke_after_354`); both are safe to retry.
  ``Stage.BODY`` starts when the content is handed to the socket: a disconnect or
  timeout there is an unknown outcome.
"""

from __future__ import annotations

import logging
import re
import select
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import aiosmtplib
from aiosmtplib import SMTPResponse
from aiosmtplib.errors import SMTPException, SMTPResponseException, SMTPServerDisconnected
from aiosmtplib.protocol import SMTPProtocol

from mailout.message.envelope import Envelope
from mailout.transports.smtp import codes as smtpcodes
from mailout.transports.smtp._aiosmtplib_compat import (
    buffered_reply,
    drain,
    mark_reply_due,
    protocol_of,
    unread,
)
from mailout.transports.smtp.outcome import Failure, Reply, SendOutcome, Stage, parse_reply

if TYPE_CHECKING:
    from mailout.transports.smtp.pool import Waiter

log = logging.getLogger(__name__)

_CONTROL = re.compile(r"[\x00-\x1f\x7f<>]")
_LINE_ENDINGS = re.compile(rb"\r\n|\n|\r(?!\n)")  # as aiosmtplib's protocol does


class Abort(Exception):
    """Ends an attempt early with a ready-made outcome."""

    def __init__(self, outcome: SendOutcome) -> None:
        super().__init__(outcome.detail)
        self.outcome = outcome


@dataclass(slots=True)
class AttemptState:
    """Where one send (or check) has got to."""

    stage: Stage = Stage.CONNECT
    reply: Reply | None = None  # the last positive reply
    smtp: aiosmtplib.SMTP | None = None
    rcpt: tuple[tuple[str, Reply], ...] = ()  # each recipient's RCPT reply so far
    # A waiting send whose MAIL, RCPT and DATA went out behind this one's content
    # (mailout.transports.smtp.pool): the connection passes to it afterwards.
    taken_along: Waiter | None = None


def reply_of(response: SMTPResponse) -> Reply:
    return parse_reply(response.code, response.message)


# What each command of a transaction must get back to go on.
_MAIL_OK: Final = (Stage.MAIL, (smtpcodes.OK,))
_RCPT_OK: Final = (Stage.RCPT, (smtpcodes.OK, smtpcodes.USER_NOT_LOCAL_WILL_FORWARD))
_DATA_OK: Final = (Stage.DATA, (smtpcodes.START_MAIL_INPUT,))
_Expected = tuple[Stage, tuple[int, ...]]


_ONE_RECIPIENT: Final = (_MAIL_OK, _RCPT_OK, _DATA_OK)


def expected_replies(recipients: int) -> Sequence[_Expected]:
    """The stage and accepted codes of each command: MAIL, one RCPT each, DATA."""
    if recipients == 1:
        return _ONE_RECIPIENT
    return [_MAIL_OK, *([_RCPT_OK] * recipients), _DATA_OK]


async def transaction(
    smtp: aiosmtplib.SMTP, envelope: Envelope, attempt: AttemptState, pipelining: bool,
    *, pooled: bool = False, answered: Sequence[SMTPResponse] | None = None,
) -> bool:
    """MAIL FROM, RCPT TO and DATA, up to the server's 354.

    With ``pipelining``, and when the server offers it: the three commands leave in one
    write and the replies are read in order; otherwise each waits for the one before.
    ``answered``: the commands went out behind another send's content and these are
    their replies, already read (:func:`read_group`); nothing is written or read.
    Every RCPT reply is kept in ``attempt.rcpt``. A negative reply to MAIL or DATA
    raises it (SMTPResponseException) at its stage; refused recipients end the
    transaction only when no recipient was accepted (an :class:`Abort` at RCPT
    carrying every reply). False if a pooled connection proved dead before its first
    reply: nothing was done there, so the caller opens a new connection.
    """
    recipients = envelope.recipients
    expected = expected_replies(len(recipients))
    try:
        if answered is not None:
            replies = list(answered)
        elif pipelining and smtp.supports_extension("pipelining"):
            protocol = protocol_of(smtp)
            mark_reply_due(protocol)
            attempt.stage = Stage.MAIL
            protocol.write(pipelined_group(smtp, envelope))
            replies = await read_group(smtp, expected, attempt)
        else:
            replies = await _one_by_one(smtp, _commands(smtp, envelope), expected, attempt)
    except ConnectionError:  # e.g. the server closed it while idle, unnoticed until now
        if not (pooled and attempt.stage is Stage.MAIL):
            raise
        discard(smtp)
        return False
    data_354 = len(replies) == len(expected) and replies[-1].code == smtpcodes.START_MAIL_INPUT
    if replies[0].code not in _MAIL_OK[1]:
        attempt.stage = Stage.MAIL
        if data_354:
            await abandon_data(smtp)
        raise SMTPResponseException(replies[0].code, replies[0].message)
    rcpt = tuple(zip(recipients, map(reply_of, replies[1:1 + len(recipients)]), strict=False))
    attempt.rcpt = rcpt
    if not any(reply.code in _RCPT_OK[1] for _, reply in rcpt):
        attempt.stage = Stage.RCPT
        if data_354:
            await abandon_data(smtp)
        refused = next(reply for _, reply in rcpt)  # MAIL succeeded: RCPT got a reply
        raise Abort(SendOutcome(Stage.RCPT, reply=refused, failure=Failure.REPLY,
                                 rcpt_replies=rcpt))
    attempt.stage = Stage.DATA
    if len(replies) < len(expected):  # a refused RCPT, then the connection went
        raise SMTPServerDisconnected("connection lost before the reply to DATA")
    if not data_354:
        raise SMTPResponseException(replies[-1].code, replies[-1].message)
    return True


def _commands(smtp: aiosmtplib.SMTP, envelope: Envelope) -> list[bytes]:
    """The MAIL, RCPT and DATA lines for addresses mailout validated at enqueue.

    Written raw: aiosmtplib's mail()/rcpt() parse each address again, which showed
    in profiles. Control characters and angle brackets are still refused here
    (ValueError), so nothing can smuggle in a command of its own.
    """
    recipients = envelope.recipients
    if not recipients:
        raise ValueError("an envelope needs at least one recipient")
    utf8 = not (envelope.mail_from.isascii() and all(r.isascii() for r in recipients))
    options = b" SMTPUTF8" if utf8 and smtp.supports_extension("smtputf8") else b""
    if not envelope.wire.isascii() and smtp.supports_extension("8bitmime"):
        options += b" BODY=8BITMIME"
    charset = "utf-8" if utf8 else "ascii"
    lines = []
    for prefix, address in ((b"MAIL FROM:<", envelope.mail_from),
                            *((b"RCPT TO:<", r) for r in recipients)):
        if _CONTROL.search(address):
            raise ValueError(f"address {address!r} has a control character")
        lines.append(prefix + address.encode(charset) + b">\r\n")
    lines[0] = lines[0][:-2] + options + b"\r\n"
    return [*lines, b"DATA\r\n"]


def pipelined_group(smtp: aiosmtplib.SMTP, envelope: Envelope) -> bytes:
    """MAIL, RCPT and DATA for ``envelope`` as one pipelined group (RFC 2920), the
    options chosen for what ``smtp``'s server offers. ValueError as :func:`_commands`."""
    return b"".join(_commands(smtp, envelope))


async def _one_by_one(smtp: aiosmtplib.SMTP, commands: list[bytes],
                      expected: Sequence[_Expected],
                      attempt: AttemptState) -> list[SMTPResponse]:
    """Each command after the reply to the one before. Stops at a refused MAIL, after a
    421 (the server is closing), and before DATA when every recipient was refused; a
    refused RCPT alone does not stop it."""
    replies: list[SMTPResponse] = []
    last_rcpt = len(commands) - 2
    for i, ((stage, accepted), command) in enumerate(zip(expected, commands, strict=True)):
        attempt.stage = stage
        protocol = protocol_of(smtp)
        mark_reply_due(protocol)
        protocol.write(command)
        reply = await next_reply(protocol)
        replies.append(reply)
        if reply.code in accepted:
            continue
        if stage is not Stage.RCPT or reply.code == smtpcodes.SERVICE_NOT_AVAILABLE:
            break
        if i == last_rcpt and not any(r.code in accepted for r in replies[1:]):
            break  # nobody to send DATA for
    return replies


async def read_group(smtp: aiosmtplib.SMTP, expected: Sequence[_Expected],
                     attempt: AttemptState) -> list[SMTPResponse]:
    """The replies to a pipelined group already written (RFC 2920), in order.

    After a negative reply the server may close (421) or stay silent: the replies
    still owed are then given up and the connection closed, since it is out of step.
    """
    protocol = protocol_of(smtp)
    replies: list[SMTPResponse] = []
    refused = False
    for stage, accepted in expected:
        attempt.stage = stage
        try:
            replies.append(await next_reply(protocol))
        except (SMTPException, OSError):
            if not refused:
                raise
            discard(smtp)
            break
        refused = refused or replies[-1].code not in accepted
    return replies


async def next_reply(protocol: SMTPProtocol) -> SMTPResponse:
    """The next reply on ``protocol``.

    aiosmtplib parses one reply per read and keeps the rest of what arrived in its
    buffer, where later pipelined replies can already be waiting. Data that arrives
    while no reply is due is dropped (``RepliesKept`` only keeps what comes while a
    parsed reply awaits pickup), so a pipelined group is read back to back: no await
    between one reply's return and the call for the next. The buffer and its parser
    are aiosmtplib internals (:mod:`._aiosmtplib_compat`).
    """
    buffered = buffered_reply(protocol)
    if buffered is not None:
        return buffered
    return await protocol.read_response()


async def abandon_data(smtp: aiosmtplib.SMTP) -> None:
    """End a DATA the server accepted with no recipient: a lone "." (RFC 2920 3.1).

    The server must deliver nothing; if it does not answer, the connection goes.
    """
    log.warning("SMTP server accepted DATA after refusing the recipient; sent an empty "
                "message to close the transaction", extra={"event": "smtp_empty_data"})
    try:
        protocol = protocol_of(smtp)
        mark_reply_due(protocol)
        protocol.write(b".\r\n")
        await next_reply(protocol)
    except (SMTPException, OSError):
        discard(smtp)


async def send_content(smtp: aiosmtplib.SMTP, data: bytes, attempt: AttemptState, *,
                       crlf_only: bool = False,
                       follow: Callable[[], bytes] | None = None) -> SendOutcome:
    """After the 354: content and ".", and the final reply, tracking whether content left.

    ``crlf_only``: ``data`` is known to have CRLF line ends only, ending in one (see
    :func:`wire_content`). ``follow``, called just before the content is written,
    gives bytes to write right after the "." in the same write (another send's
    pipelined group), or b"". Their replies come after the final reply; they are left
    for :func:`read_group`, which must be called before anything else is awaited."""
    attempt.stage = Stage.DATA
    protocol = smtp.protocol
    if protocol is None or not protocol.is_connected or server_spoke_after_354(protocol):
        discard(smtp)  # out of step, or closing: no content goes out on it
        detail = "connection closed after 354, before the content was sent"
        raise Abort(SendOutcome(Stage.DATA, failure=Failure.DISCONNECT, detail=detail))
    attempt.stage = Stage.BODY
    mark_reply_due(protocol)  # as execute_data_command: a reply is now due
    await _write_content(protocol, data, crlf_only, b"" if follow is None else follow())
    reply = reply_of(await next_reply(protocol))
    # The RCPT replies go in now, so that _run need not copy the outcome to add them.
    if reply.code // 100 == smtpcodes.POSITIVE:
        return SendOutcome(Stage.BODY, reply=reply, rcpt_replies=attempt.rcpt)
    return SendOutcome(Stage.BODY, reply=reply, failure=Failure.REPLY, rcpt_replies=attempt.rcpt)


def server_spoke_after_354(protocol: SMTPProtocol) -> bool:
    """Whether anything came from the server after its 354 that no read has taken:
    kept bytes, or unread data or end of stream on the socket.

    Nothing is due from the server until the content's final ".", so anything there
    now (a close, or a 421 before one) means it is not waiting for the content: a send
    stopped here provably sent none of it (``Stage.DATA``, safe to retry), while one
    that writes it would end as an unknown outcome. The socket is asked directly
    (a poll with no timeout) rather than the event loop given turns to deliver a close
    that came with the 354: how many turns that takes is the loop's business."""
    if unread(protocol):
        return True
    transport = protocol.transport
    sock = None if transport is None else transport.get_extra_info("socket")
    if sock is None:
        return False  # not a socket (no such transport here today): nothing to ask
    return _readable(sock.fileno())


def _readable(fd: int) -> bool:
    """Data or end of stream (or an error) waiting on ``fd``, without waiting."""
    if fd < 0:
        return True  # closed under us
    if not hasattr(select, "poll"):  # Windows: no poll(), and select() has no fd limit
        return bool(select.select([fd], [], [], 0)[0])
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    return bool(poll.poll(0))


WRITE_CHUNK: Final = 256 * 1024  # large contents go out in pieces of this size


async def _write_content(protocol: SMTPProtocol, data: bytes, crlf_only: bool,
                         after: bytes) -> None:
    """The content with CRLF line endings, dot-stuffing and the terminating ".", then
    ``after`` in the same write.

    A message of mailout's own renderer (CRLF only, no line starting with a dot: the
    common case) is written as it is, without a copy. A large one goes out in
    pieces, each after the transport's buffer drained: the socket buffer never
    holds a second copy of a message with megabytes of attachments.
    """
    content = wire_content(data, crlf_only=crlf_only)
    if len(content) <= WRITE_CHUNK:
        protocol.write(b"".join((content, b".\r\n", after)))
        return
    for start in range(0, len(content), WRITE_CHUNK):
        protocol.write(content[start:start + WRITE_CHUNK])  # a piece is copied, not all
        await drain(protocol)
    protocol.write(b".\r\n" + after)


def wire_content(data: bytes, *, crlf_only: bool = False) -> bytes:
    """CRLF line endings, a final CRLF and dot-stuffing; the "." is the caller's.

    ``crlf_only`` says ``data`` already has CRLF line ends only and ends in one, as
    mailout's renderer guarantees (``Envelope.wire_crlf_only``): the three scans that
    would find out, a measurable part of a send (docs/capacity.md), are skipped. Dot-stuffing is
    never skipped: a line starting with "." must not end the data early.
    """
    if crlf_only:
        content = data
    else:
        crlf = data.count(b"\r\n")
        if data.count(b"\n") == crlf and data.count(b"\r") == crlf:
            content = data  # already CRLF only: skip the regex
        else:
            content = _LINE_ENDINGS.sub(b"\r\n", data)
        if not content.endswith(b"\r\n"):
            content += b"\r\n"
    # Every line now ends in CRLF, so a line start is the start or just after "\n".
    # Looking for "\n." first is much cheaper than a replace that finds nothing, and
    # splitting there cheaper than replacing "\r\n." (whose search starts a partial
    # match at every line end).
    if b"\n." in content:
        content = b"\n..".join(content.split(b"\n."))
    if content.startswith(b"."):
        content = b"." + content
    return content


def discard(smtp: aiosmtplib.SMTP) -> None:
    """Close ``smtp`` without a QUIT: its state is unknown or it is out of step."""
    if smtp.is_connected:
        log.debug("closing SMTP connection to %s:%s", smtp.hostname, smtp.port,
                  extra={"event": "smtp_closing", "host": smtp.hostname, "port": smtp.port})
    smtp.close()
