"""The SMTP transport: a small pool of aiosmtplib connections that never raises.

:meth:`SmtpTransport.exchange` reports every SMTP, network and TLS problem as a
:class:`SendOutcome` naming the :class:`Stage` where it happened; :meth:`~SmtpTransport.send`
classifies it into the provider-neutral :class:`SendResult`. Choices worth knowing:

* ``TlsMode.STARTTLS`` makes STARTTLS mandatory: a server that does not offer it
  gives ``Failure.TLS`` at ``Stage.STARTTLS`` (no reply). A negative reply to the
  STARTTLS command is a ``Failure.REPLY`` there, and the EHLO repeated inside the
  TLS session also counts as ``Stage.STARTTLS``.
* MAIL, RCPT and DATA go out in one write when the server offers PIPELINING
  (RFC 2920), and one at a time otherwise. A refused RCPT does not end the
  transaction while another recipient was accepted: the message goes to the
  accepted ones, and every RCPT reply is kept in the outcome (``rcpt_replies``).
  Otherwise the outcome names the stage of the negative reply; nothing of the
  content has left at that point.
* The DATA phase is driven by hand (aiosmtplib's ``data()`` hides where it
  failed): ``Stage.DATA`` covers the DATA command up to the 354 and also a
  connection already found closed right after the 354, before any content was
  written; both are safe to retry. ``Stage.BODY`` starts when the content is
  handed to the socket: a disconnect or timeout there is an unknown outcome.
* The deadline (``timeout``) covers one send from taking a pooled connection to
  the final reply; waiting for a free pool slot is not part of it.
* An envelope address holding control characters raises ValueError (from
  aiosmtplib, before anything is written): a bug upstream, not a delivery outcome.
* An invalid ``ca_file`` raises (OSError / ssl.SSLError) when the transport is
  built: that is a configuration error, not a delivery outcome.
* One refused AUTH is enough: until an AUTH has succeeded, new connections
  authenticate one at a time, and after a refusal (535, 530, any non-4yz reply)
  the connections waiting to authenticate report the same refusal without trying
  (a provider may lock the account after a few failures). The latch lifts once no
  send is in flight, so the worker's probe, sent alone, tries AUTH again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import ssl
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from typing import Any, Final

import aiosmtplib
from aiosmtplib import SMTPResponse
from aiosmtplib.errors import (
    SMTPException,
    SMTPResponseException,
    SMTPServerDisconnected,
)
from aiosmtplib.protocol import SMTPProtocol

from mailout.transports.base import CheckResult, Envelope, SendResult
from mailout.transports.smtp import check as smtp_check
from mailout.transports.smtp import codes as smtpcodes
from mailout.transports.smtp.classify import to_result
from mailout.transports.smtp.outcome import Failure, Reply, SendOutcome, Stage
from mailout.transports.smtp.settings import (
    SmtpSettings,
    TlsMode,
    cleartext_auth_refused,
    client_tls_context,
)

log = logging.getLogger("mailout.transports.smtp.client")

QUIT_TIMEOUT: Final = 2.0  # seconds allowed for a polite QUIT when closing
_MIN_CODE: Final = 100  # aiosmtplib reports an unparsable reply as code -1
_ENHANCED = re.compile(r"([245])\.\d{1,3}\.\d{1,3}(?![\d.])")
_LINE_ENDINGS = re.compile(rb"\r\n|\n|\r(?!\n)")  # as aiosmtplib's protocol does
_LEADING_DOT = re.compile(rb"(?m)^\.")
_TLS_STAGES: Final = (Stage.CONNECT, Stage.STARTTLS)
_OPEN_TRANSACTION: Final = (Stage.MAIL, Stage.RCPT, Stage.DATA)  # a reply here needs RSET


def parse_reply(code: int, text: str) -> Reply:
    """A :class:`Reply`, with the RFC 3463 code if the text starts with one of its class."""
    match = _ENHANCED.match(text)
    same_class = match is not None and int(match.group(1)) == code // 100
    return Reply(code, text, match.group(0) if match and same_class else None)


def _reply(response: SMTPResponse) -> Reply:
    return parse_reply(response.code, response.message)


class _Abort(Exception):
    """Ends an attempt early with a ready-made outcome."""

    def __init__(self, outcome: SendOutcome) -> None:
        super().__init__(outcome.detail)
        self.outcome = outcome


@dataclass
class _Attempt:
    """Where one send (or check) has got to."""

    stage: Stage = Stage.CONNECT
    reply: Reply | None = None  # the last positive reply
    smtp: aiosmtplib.SMTP | None = None
    rcpt: tuple[tuple[str, Reply], ...] = ()  # each recipient's RCPT reply so far


class SmtpTransport:
    """A :class:`~mailout.transports.base.Transport` over SMTP, ``pool_size`` connections."""

    name = "smtp"

    def __init__(self, settings: SmtpSettings) -> None:
        self._settings = settings
        # A relay preset (smtp+resend://) names the provider and its key window.
        self.name = settings.preset or "smtp"
        self.dedupe_window: float | None = settings.dedupe_window
        self._tls = client_tls_context(settings) if settings.tls is not TlsMode.NONE else None
        self._slots = asyncio.Semaphore(settings.pool_size)
        self._idle: list[tuple[aiosmtplib.SMTP, bool]] = []  # (connection, needs RSET)
        self._hostname = settings.local_hostname
        self._closed = False
        self._active = 0  # sends in flight
        self._auth_lock = asyncio.Lock()  # one AUTH at a time until one has succeeded
        self._auth_proven = False
        self._auth_refused: SendOutcome | None = None  # latched until no send is in flight

    @property
    def settings(self) -> SmtpSettings:
        return self._settings

    async def send(self, envelope: Envelope) -> SendResult:
        """Send ``envelope`` and classify what happened. Never raises for a delivery problem."""
        return to_result(await self.exchange(envelope), self._settings)

    async def exchange(self, envelope: Envelope) -> SendOutcome:
        """Send ``envelope``; report what happened in SMTP's terms."""
        self._active += 1
        try:
            async with self._slots:
                attempt = _Attempt()
                try:
                    outcome = await self._run(attempt, self._deliver(attempt, envelope))
                except BaseException:  # cancelled from outside: the connection state is unknown
                    self._release(attempt.smtp, None)
                    raise
                self._release(attempt.smtp, outcome)
                return outcome
        finally:
            self._active -= 1
            if self._active == 0:
                self._auth_refused = None  # the next send (a probe) may try AUTH again

    async def check(self) -> CheckResult:
        """Connect, EHLO, STARTTLS and AUTH as configured, send nothing, and say in
        plain words what went wrong and which setting to look at."""
        try:
            outcome = await check_connection(self._settings)
        except (OSError, ssl.SSLError) as exc:  # building the TLS context: SMTP_CA_FILE
            return smtp_check.unusable_ca_file(self._settings, exc)
        return smtp_check.verdict(outcome, self._settings)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        await asyncio.gather(*(_quit(smtp) for smtp, _ in idle))

    async def _run(self, attempt: _Attempt, work: Coroutine[Any, Any, SendOutcome]) -> SendOutcome:
        try:
            async with asyncio.timeout(self._settings.timeout):
                outcome = await work
        except _Abort as abort:
            outcome = abort.outcome
        except (SMTPException, OSError, TimeoutError) as exc:
            outcome = _outcome_for(exc, attempt.stage, self._settings.timeout)
        if outcome.stage is Stage.AUTH and outcome.reply is not None:
            # An AUTH reply can echo a challenge or the credentials: keep the codes only.
            outcome = replace(outcome, reply=replace(outcome.reply, text=AUTH_REPLY_REDACTED))
        if attempt.rcpt and not outcome.rcpt_replies:
            outcome = replace(outcome, rcpt_replies=attempt.rcpt)
        return outcome

    async def _deliver(self, attempt: _Attempt, envelope: Envelope) -> SendOutcome:
        smtp = await self._pooled(attempt)
        pipelining = self._settings.pipelining
        if smtp is None or not await _transaction(smtp, envelope, attempt, pipelining,
                                                  pooled=True):
            smtp = await self._open(attempt)
            await _transaction(smtp, envelope, attempt, pipelining)
        return await _content(smtp, envelope.wire, attempt)

    async def _pooled(self, attempt: _Attempt) -> aiosmtplib.SMTP | None:
        """An idle connection in a clean state (RSET if needed), if there is one."""
        while self._idle:
            smtp, dirty = self._idle.pop()
            attempt.smtp = smtp
            if smtp.is_connected and (not dirty or await _reset(smtp)):
                return smtp
            _discard(smtp)
        return None

    async def _open(self, attempt: _Attempt) -> aiosmtplib.SMTP:
        """Connect, EHLO, STARTTLS (+ EHLO), AUTH."""
        settings = self._settings
        implicit = settings.tls is TlsMode.IMPLICIT
        if cleartext_auth_refused(settings):
            raise _Abort(SendOutcome(Stage.AUTH, failure=Failure.CLEARTEXT_AUTH,
                                     detail=_CLEARTEXT_AUTH))
        if self._hostname is None:
            self._hostname = await asyncio.to_thread(socket.getfqdn)
        smtp = aiosmtplib.SMTP(
            hostname=settings.host,
            port=settings.port,
            local_hostname=self._hostname,
            timeout=None,  # the whole attempt runs under one deadline instead
            use_tls=implicit,
            start_tls=False,
            tls_context=self._tls if implicit else None,
        )
        attempt.smtp, attempt.stage = smtp, Stage.CONNECT
        attempt.reply = _reply(await smtp.connect())
        log.debug("opened SMTP connection to %s:%d", settings.host, settings.port)
        attempt.stage = Stage.EHLO
        attempt.reply = _reply(await smtp.ehlo())
        if settings.tls is TlsMode.STARTTLS:
            await self._starttls(smtp, attempt)
        if settings.username is not None:
            attempt.stage = Stage.AUTH
            if not smtp.supports_extension("auth"):
                raise _Abort(SendOutcome(Stage.AUTH, failure=Failure.AUTH_NOT_OFFERED,
                                         detail="SMTP_USER is set but the server offers no AUTH"))
            attempt.reply = _reply(await self._auth(smtp))
        return smtp

    async def _auth(self, smtp: aiosmtplib.SMTP) -> SMTPResponse:
        """AUTH, at most one refusal per burst of sends (see the module docstring)."""
        assert self._settings.username is not None  # only called with a user set
        user, password = self._settings.username, self._settings.password or ""
        if self._auth_proven:
            return await self._auth_once(smtp, user, password)
        async with self._auth_lock:
            refused = self._auth_refused
            if refused is not None:
                detail = "AUTH not tried: it was just refused on another connection"
                raise _Abort(replace(refused, detail=detail))
            return await self._auth_once(smtp, user, password)

    async def _auth_once(self, smtp: aiosmtplib.SMTP, user: str, password: str) -> SMTPResponse:
        try:
            response = await _authenticate(smtp, user, password)
        except SMTPResponseException as exc:
            if exc.code // 100 != smtpcodes.TRANSIENT:
                self._auth_proven = False
                self._auth_refused = SendOutcome(
                    Stage.AUTH, reply=parse_reply(exc.code, exc.message), failure=Failure.REPLY)
            raise
        self._auth_proven = True
        return response

    async def _starttls(self, smtp: aiosmtplib.SMTP, attempt: _Attempt) -> None:
        attempt.stage = Stage.STARTTLS
        if not smtp.supports_extension("starttls"):
            detail = "server does not offer STARTTLS, which is required"
            raise _Abort(SendOutcome(Stage.STARTTLS, failure=Failure.TLS, detail=detail))
        await smtp.starttls(server_hostname=self._settings.host, tls_context=self._tls)
        attempt.reply = _reply(await smtp.ehlo())

    def _release(self, smtp: aiosmtplib.SMTP | None, outcome: SendOutcome | None) -> None:
        """Pool the connection if its state is known and clean (or cleanable by RSET)."""
        if smtp is None:
            return
        if outcome is None or self._closed or not smtp.is_connected or not _reusable(outcome):
            _discard(smtp)
            return
        needs_rset = outcome.failure is not None and outcome.stage in _OPEN_TRANSACTION
        self._idle.append((smtp, needs_rset))


async def check_connection(settings: SmtpSettings) -> SendOutcome:
    """Connect, EHLO, STARTTLS, AUTH and QUIT without sending anything.

    All well: an accepted outcome at the last stage done (AUTH, else STARTTLS,
    else EHLO) holding that stage's reply.
    """
    transport = SmtpTransport(settings)
    attempt = _Attempt()

    async def probe() -> SendOutcome:
        await transport._open(attempt)
        return SendOutcome(attempt.stage, reply=attempt.reply)

    try:
        return await transport._run(attempt, probe())
    finally:
        if attempt.smtp is not None:
            await _quit(attempt.smtp)


_CONTROL = re.compile(r"[\x00-\x1f\x7f<>]")
AUTH_REPLY_REDACTED = "(AUTH reply text not kept)"
_CLEARTEXT_AUTH = ("refusing to send the password without TLS to a host that is not "
                   "loopback (set SMTP_TLS, or SMTP_ALLOW_PLAINTEXT_AUTH=true on a trusted "
                   "network)")
# What each command of a transaction must get back to go on.
_MAIL_OK: Final = (Stage.MAIL, (smtpcodes.OK,))
_RCPT_OK: Final = (Stage.RCPT, (smtpcodes.OK, smtpcodes.USER_NOT_LOCAL_WILL_FORWARD))
_DATA_OK: Final = (Stage.DATA, (smtpcodes.START_MAIL_INPUT,))
_Expected = tuple[Stage, tuple[int, ...]]


def _expected(recipients: int) -> list[_Expected]:
    """The stage and accepted codes of each command: MAIL, one RCPT each, DATA."""
    return [_MAIL_OK, *([_RCPT_OK] * recipients), _DATA_OK]


async def _transaction(
    smtp: aiosmtplib.SMTP, envelope: Envelope, attempt: _Attempt, pipelining: bool,
    *, pooled: bool = False,
) -> bool:
    """MAIL FROM, RCPT TO and DATA, up to the server's 354.

    With ``pipelining``, and when the server offers it: the three commands leave in one
    write and the replies are read in order; otherwise each waits for the one before.
    Every RCPT reply is kept in ``attempt.rcpt``. A negative reply to MAIL or DATA
    raises it (SMTPResponseException) at its stage; refused recipients end the
    transaction only when no recipient was accepted (an :class:`_Abort` at RCPT
    carrying every reply). False if a pooled connection proved dead before its first
    reply: nothing was done there, so the caller opens a new connection.
    """
    commands = _commands(smtp, envelope)
    recipients = envelope.recipients
    expected = _expected(len(recipients))
    pipelined = pipelining and smtp.supports_extension("pipelining")
    try:
        if pipelined:
            replies = await _pipelined(smtp, commands, expected, attempt)
        else:
            replies = await _one_by_one(smtp, commands, expected, attempt)
    except ConnectionError:  # e.g. the server closed it while idle, unnoticed until now
        if not (pooled and attempt.stage is Stage.MAIL):
            raise
        _discard(smtp)
        return False
    data_354 = len(replies) == len(expected) and replies[-1].code == smtpcodes.START_MAIL_INPUT
    if replies[0].code not in _MAIL_OK[1]:
        attempt.stage = Stage.MAIL
        if data_354:
            await _abandon_data(smtp)
        raise SMTPResponseException(replies[0].code, replies[0].message)
    rcpt = tuple(zip(recipients, map(_reply, replies[1:1 + len(recipients)]), strict=False))
    attempt.rcpt = rcpt
    if not any(reply.code in _RCPT_OK[1] for _, reply in rcpt):
        attempt.stage = Stage.RCPT
        if data_354:
            await _abandon_data(smtp)
        refused = next(reply for _, reply in rcpt)  # MAIL succeeded: RCPT got a reply
        raise _Abort(SendOutcome(Stage.RCPT, reply=refused, failure=Failure.REPLY,
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


def _protocol(smtp: aiosmtplib.SMTP) -> SMTPProtocol:
    protocol = smtp.protocol
    if protocol is None or not protocol.is_connected:
        raise SMTPServerDisconnected("Connection lost")
    return protocol


async def _one_by_one(smtp: aiosmtplib.SMTP, commands: list[bytes],
                      expected: list[_Expected], attempt: _Attempt) -> list[SMTPResponse]:
    """Each command after the reply to the one before. Stops at a refused MAIL, after a
    421 (the server is closing), and before DATA when every recipient was refused; a
    refused RCPT alone does not stop it."""
    replies: list[SMTPResponse] = []
    last_rcpt = len(commands) - 2
    for i, ((stage, accepted), command) in enumerate(zip(expected, commands, strict=True)):
        attempt.stage = stage
        protocol = _protocol(smtp)
        protocol._response_pending = True  # as aiosmtplib's execute_command does
        protocol.write(command)
        reply = await _next_reply(protocol)
        replies.append(reply)
        if reply.code in accepted:
            continue
        if stage is not Stage.RCPT or reply.code == smtpcodes.SERVICE_NOT_AVAILABLE:
            break
        if i == last_rcpt and not any(r.code in accepted for r in replies[1:]):
            break  # nobody to send DATA for
    return replies


async def _pipelined(smtp: aiosmtplib.SMTP, commands: list[bytes],
                     expected: list[_Expected], attempt: _Attempt) -> list[SMTPResponse]:
    """All commands in one write, then their replies in order (RFC 2920).

    After a negative reply the server may close (421) or stay silent: the replies
    still owed are then given up and the connection closed, since it is out of step.
    """
    protocol = _protocol(smtp)
    protocol._response_pending = True
    attempt.stage = Stage.MAIL
    protocol.write(b"".join(commands))
    replies: list[SMTPResponse] = []
    refused = False
    for stage, accepted in expected:
        attempt.stage = stage
        try:
            replies.append(await _next_reply(protocol))
        except (SMTPException, OSError):
            if not refused:
                raise
            _discard(smtp)
            break
        refused = refused or replies[-1].code not in accepted
    return replies


async def _next_reply(protocol: SMTPProtocol) -> SMTPResponse:
    """The next reply on ``protocol``.

    aiosmtplib parses one reply per read and keeps the rest of what arrived in its
    buffer, where later pipelined replies can already be waiting. It drops data that
    arrives while no reply is due, so a pipelined group is read back to back: no
    await between one reply's return and the call for the next. The buffer and its
    parser are aiosmtplib internals (unchanged from 3.0 to 5.1); the transport tests
    run every outcome through them, pipelined and not.
    """
    protocol._response_pending = True
    buffered = protocol._read_response_from_buffer()
    if buffered is not None:
        return buffered
    return await protocol.read_response()


async def _abandon_data(smtp: aiosmtplib.SMTP) -> None:
    """End a DATA the server accepted with no recipient: a lone "." (RFC 2920 3.1).

    The server must deliver nothing; if it does not answer, the connection goes.
    """
    log.warning("SMTP server accepted DATA after refusing the recipient; sent an empty "
                "message to close the transaction")
    try:
        protocol = _protocol(smtp)
        protocol._response_pending = True
        protocol.write(b".\r\n")
        await _next_reply(protocol)
    except (SMTPException, OSError):
        _discard(smtp)


async def _authenticate(smtp: aiosmtplib.SMTP, username: str, password: str) -> SMTPResponse:
    """One AUTH exchange (never several: failures count towards lockouts), in order of
    preference among the advertised mechanisms; PLAIN if none is advertised."""
    methods = {"plain": smtp.auth_plain, "login": smtp.auth_login, "cram-md5": smtp.auth_crammd5}
    mechanism = next((m for m in methods if m in smtp.server_auth_methods), "plain")
    return await methods[mechanism](username, password)


async def _content(smtp: aiosmtplib.SMTP, data: bytes, attempt: _Attempt) -> SendOutcome:
    """After the 354: content and ".", and the final reply, tracking whether content left."""
    attempt.stage = Stage.DATA
    protocol = smtp.protocol
    # Let events that arrived with the 354 (a close) be processed before writing.
    for _ in range(2):
        await asyncio.sleep(0)
    if protocol is None or not protocol.is_connected:
        detail = "connection closed after 354, before the content was sent"
        raise _Abort(SendOutcome(Stage.DATA, failure=Failure.DISCONNECT, detail=detail))
    attempt.stage = Stage.BODY
    protocol._response_pending = True  # as execute_data_command: a reply is now due
    await _write_content(protocol, data)
    reply = _reply(await _next_reply(protocol))
    # The RCPT replies go in now, so that _run need not copy the outcome to add them.
    if reply.code // 100 == smtpcodes.POSITIVE:
        return SendOutcome(Stage.BODY, reply=reply, rcpt_replies=attempt.rcpt)
    return SendOutcome(Stage.BODY, reply=reply, failure=Failure.REPLY, rcpt_replies=attempt.rcpt)


WRITE_CHUNK: Final = 256 * 1024  # large contents go out in pieces of this size


async def _write_content(protocol: SMTPProtocol, data: bytes) -> None:
    """The content with CRLF line endings, dot-stuffing and the terminating ".".

    A message of mailout's own renderer (CRLF only, no line starting with a dot: the
    common case) is written as it is, without a copy. A large one goes out in
    pieces, each after the transport's buffer drained: the socket buffer never
    holds a second copy of a message with megabytes of attachments.
    """
    content = _wire_content(data)
    if len(content) <= WRITE_CHUNK:
        protocol.write(content + b".\r\n")
        return
    for start in range(0, len(content), WRITE_CHUNK):
        protocol.write(content[start:start + WRITE_CHUNK])  # a piece is copied, not all
        await protocol._drain_helper()  # aiosmtplib's flow control (FlowControlMixin)
    protocol.write(b".\r\n")


def _wire_content(data: bytes) -> bytes:
    """CRLF line endings, a final CRLF and dot-stuffing; the "." is the caller's."""
    crlf = data.count(b"\r\n")
    if data.count(b"\n") == crlf and data.count(b"\r") == crlf:
        content = data  # already CRLF only (mailout's own renderer): skip the regex
    else:
        content = _LINE_ENDINGS.sub(b"\r\n", data)
    if not content.endswith(b"\r\n"):
        content += b"\r\n"
    # Every line now ends in CRLF, so a line start is the start or just after "\r\n".
    # Looking for "\n." first is much cheaper than a replace that finds nothing: the
    # three-byte pattern starts a partial match at every line end.
    if b"\n." in content:
        content = content.replace(b"\r\n.", b"\r\n..")
    if content.startswith(b"."):
        content = b"." + content
    return content


async def _reset(smtp: aiosmtplib.SMTP) -> bool:
    try:
        await smtp.rset()
    except (SMTPException, OSError):
        return False
    return True


def _reusable(outcome: SendOutcome) -> bool:
    """Accepted, or a negative reply inside a transaction other than 421 (closing)."""
    if outcome.accepted or outcome.reply is None or outcome.failure is not Failure.REPLY:
        return outcome.accepted
    closing = outcome.reply.code == smtpcodes.SERVICE_NOT_AVAILABLE
    return not closing and outcome.stage in (*_OPEN_TRANSACTION, Stage.BODY)


def _discard(smtp: aiosmtplib.SMTP) -> None:
    if smtp.is_connected:
        log.debug("closing SMTP connection to %s:%s", smtp.hostname, smtp.port)
    smtp.close()


async def _quit(smtp: aiosmtplib.SMTP) -> None:
    with contextlib.suppress(SMTPException, OSError, TimeoutError):
        if smtp.is_connected:
            async with asyncio.timeout(QUIT_TIMEOUT):
                await smtp.quit()
    _discard(smtp)


def _outcome_for(exc: BaseException, stage: Stage, timeout: float) -> SendOutcome:
    if isinstance(exc, SMTPResponseException) and exc.code >= _MIN_CODE:
        return SendOutcome(stage, reply=parse_reply(exc.code, exc.message), failure=Failure.REPLY)
    failure = _failure_kind(exc, stage)
    if failure is Failure.TIMEOUT:
        return SendOutcome(stage, failure=failure, detail=f"timed out after {timeout:g}s")
    return SendOutcome(stage, failure=failure, detail=f"{type(exc).__name__}: {exc}"[:200])


def _failure_kind(exc: BaseException, stage: Stage) -> Failure:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 8:
        chain.append(current)
        current = current.__cause__ or current.__context__

    def has(*kinds: type[BaseException]) -> bool:
        return any(isinstance(e, kinds) for e in chain)

    if stage in _TLS_STAGES and has(ssl.SSLError):
        return Failure.TLS
    if has(socket.gaierror):
        return Failure.DNS
    if has(TimeoutError):
        return Failure.TIMEOUT
    if stage is Stage.CONNECT and has(OSError) and not has(SMTPServerDisconnected):
        return Failure.REFUSED
    return Failure.DISCONNECT
