"""The SMTP transport: a small pool of aiosmtplib connections that never raises.

:meth:`SmtpTransport.exchange` reports every SMTP, network and TLS problem as a
:class:`SendOutcome` naming the :class:`Stage` where it happened; :meth:`~SmtpTransport.send`
classifies it into the provider-neutral :class:`SendResult`. Choices worth knowing:

* ``TlsMode.STARTTLS`` makes STARTTLS mandatory: a server that does not offer it
  gives ``Failure.TLS`` at ``Stage.STARTTLS`` (no reply). A negative reply to the
  STARTTLS command is a ``Failure.REPLY`` there, and the EHLO repeated inside the
  TLS session also counts as ``Stage.STARTTLS``.
* What happens on a ready connection (pipelined MAIL, RCPT and DATA, recipients
  refused one by one, where ``Stage.DATA`` ends and ``Stage.BODY`` begins) is
  :mod:`mailout.transports.smtp.transaction`'s to say.
* The deadline (``timeout``) covers one send from taking a pooled connection to
  the final reply; waiting for a free pool slot is not part of it.
* On a server that offers PIPELINING, a send that waits for a pool slot rides on
  another's connection: the content of one and the MAIL, RCPT and DATA of the next
  go out in one write (:mod:`mailout.transports.smtp.pool`). The next send's replies are read
  after the final reply, under a deadline of their own; if they do not come, or the
  connection cannot go on (a 421, a lost reply), that send starts afresh on another
  connection: nothing of it has left but its envelope.
* An envelope address holding control characters raises ValueError (before
  anything is written): a bug upstream, not a delivery outcome.
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
import ssl
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any, Final

import aiosmtplib
from aiosmtplib import SMTPResponse
from aiosmtplib.errors import (
    SMTPException,
    SMTPResponseException,
)

from mailout.message.envelope import Envelope
from mailout.transports.base import CheckResult, SendResult
from mailout.transports.smtp import check as smtp_check
from mailout.transports.smtp import codes as smtpcodes
from mailout.transports.smtp._aiosmtplib_compat import keep_replies
from mailout.transports.smtp.classify import greeting_timed_out, to_result
from mailout.transports.smtp.failures import outcome_for_error
from mailout.transports.smtp.outcome import Failure, SendOutcome, Stage, parse_reply
from mailout.transports.smtp.pool import Handover, Slots, Waiter
from mailout.transports.smtp.settings import (
    SmtpSettings,
    TlsMode,
    cleartext_auth_refused,
    client_tls_context,
    ehlo_name,
    ehlo_warning,
)
from mailout.transports.smtp.transaction import (
    Abort,
    AttemptState,
    discard,
    expected_replies,
    pipelined_group,
    read_group,
    reply_of,
    send_content,
    transaction,
)

log = logging.getLogger(__name__)

# How long a TLS handshake probe may take (after a greeting never came).
TLS_PROBE_SECONDS: Final = 5.0

QUIT_TIMEOUT: Final = 2.0  # seconds allowed for a polite QUIT when closing
_OPEN_TRANSACTION: Final = (Stage.MAIL, Stage.RCPT, Stage.DATA)  # a reply here needs RSET


class SmtpTransport:
    """A :class:`~mailout.transports.base.Transport` over SMTP, ``pool_size`` connections."""

    name = "smtp"

    def __init__(self, settings: SmtpSettings) -> None:
        self._settings = settings
        # A relay preset (smtp+resend://) names the provider and its key window.
        self.name = settings.preset or "smtp"
        self.dedupe_window: float | None = settings.dedupe_window
        self._tls = client_tls_context(settings) if settings.tls is not TlsMode.NONE else None
        self._slots = Slots(settings.pool_size)
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
        outcome = await self.exchange(envelope)
        speaks_tls = greeting_timed_out(outcome, self._settings) and \
            await answers_tls(self._settings)
        return to_result(outcome, self._settings, speaks_tls)

    async def exchange(self, envelope: Envelope) -> SendOutcome:
        """Send ``envelope``; report what happened in SMTP's terms."""
        self._active += 1
        try:
            # No coroutine for the common case of a free slot and nobody taken along.
            slots = self._slots
            handover = None if slots.take_free() else await slots.acquire(envelope)
            attempt = AttemptState()
            try:
                outcome = await self._run(attempt, self._deliver(attempt, envelope, handover))
            except BaseException:  # cancelled from outside: the connection state is unknown
                self._let_go(attempt)
                raise
            taken, attempt.taken_along = attempt.taken_along, None
            if taken is None:
                self._release(attempt.smtp, outcome)
                slots.release()
            else:
                await self._pass_on(attempt, taken, outcome)
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
        if greeting_timed_out(outcome, self._settings) and await answers_tls(self._settings):
            return smtp_check.implicit_tls_port(self._settings)
        result = smtp_check.verdict(outcome, self._settings)
        warning = ehlo_warning(await asyncio.to_thread(ehlo_name, self._settings))
        return replace(result, warnings=(warning,)) if warning else result

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        await asyncio.gather(*(_quit(smtp) for smtp, _ in idle))

    async def _run(self, attempt: AttemptState,
                   work: Coroutine[Any, Any, SendOutcome]) -> SendOutcome:
        try:
            async with asyncio.timeout(self._settings.timeout):
                outcome = await work
        except Abort as abort:
            outcome = abort.outcome
        except (SMTPException, OSError, TimeoutError) as exc:
            outcome = outcome_for_error(exc, attempt.stage, self._settings.timeout)
        if outcome.stage is Stage.AUTH and outcome.reply is not None:
            # An AUTH reply can echo a challenge or the credentials: keep the codes only.
            outcome = replace(outcome, reply=replace(outcome.reply, text=AUTH_REPLY_REDACTED))
        if attempt.rcpt and not outcome.rcpt_replies:
            outcome = replace(outcome, rcpt_replies=attempt.rcpt)
        return outcome

    async def _deliver(self, attempt: AttemptState, envelope: Envelope,
                       handover: Handover | None) -> SendOutcome:
        pipelining = self._settings.pipelining
        smtp: aiosmtplib.SMTP | None
        if handover is not None:  # taken along: our commands are answered already
            smtp = attempt.smtp = handover.smtp
            ready = await transaction(handover.smtp, envelope, attempt, pipelining,
                                      pooled=True, answered=handover.replies)
        else:
            smtp = await self._pooled(attempt)
            ready = smtp is not None and await transaction(smtp, envelope, attempt,
                                                           pipelining, pooled=True)
        if smtp is None or not ready:
            smtp = await self._open(attempt)
            await transaction(smtp, envelope, attempt, pipelining)
        connection = smtp
        return await send_content(smtp, envelope.wire, attempt,
                                  crlf_only=envelope.wire_crlf_only,
                                  follow=lambda: self._take_along(connection, attempt))

    def _pipelines(self, smtp: aiosmtplib.SMTP) -> bool:
        return self._settings.pipelining and smtp.supports_extension("pipelining")

    def _take_along(self, smtp: aiosmtplib.SMTP, attempt: AttemptState) -> bytes:
        """The first waiting send's MAIL, RCPT and DATA, to write behind this send's
        content (see :mod:`mailout.transports.smtp.pool`); b"" when no send waits or
        the connection does not pipeline."""
        waiter = self._slots.first_waiting()
        if waiter is None or not self._pipelines(smtp):
            return b""
        try:
            group = pipelined_group(smtp, waiter.envelope)
        except Exception:  # a bad address, a failing wire form: that send finds out itself
            return b""
        self._slots.take_along(waiter)
        attempt.taken_along = waiter
        return group

    async def _pass_on(self, attempt: AttemptState, taken: Waiter,
                       outcome: SendOutcome) -> None:
        """Pass the slot on to ``taken``, whose commands went out behind this send's
        content: read its replies first (the next thing on the connection, under a
        deadline of its own) and hand both over; if that fails, it gets the slot alone
        and starts afresh."""
        smtp = attempt.smtp
        assert smtp is not None  # a send is taken along only behind written content
        replies = None
        try:
            if not self._closed and smtp.is_connected and _reusable(outcome):
                expected = expected_replies(len(taken.envelope.recipients))
                async with asyncio.timeout(self._settings.timeout):
                    replies = await read_group(smtp, expected, AttemptState())
        except (SMTPException, OSError, TimeoutError):
            replies = None
        except BaseException:
            self._hand_on(taken, smtp, None)
            raise
        self._hand_on(taken, smtp, Handover(smtp, tuple(replies)) if replies else None)

    def _hand_on(self, taken: Waiter, smtp: aiosmtplib.SMTP, handover: Handover | None) -> None:
        """Give ``taken`` the slot, with the connection when ``handover`` says so; the
        connection goes otherwise. If ``taken`` was cancelled meanwhile, the slot goes
        back to the pool (and a connection whose replies were read goes: out of step)."""
        if handover is not None and self._slots.hand_over(taken, handover):
            return
        discard(smtp)
        if handover is None and self._slots.hand_over(taken, None):
            return
        self._slots.release()

    def _let_go(self, attempt: AttemptState) -> None:
        """Release after a cancelled send: the connection goes; a send taken along
        gets the slot and starts afresh."""
        self._release(attempt.smtp, None)
        taken, attempt.taken_along = attempt.taken_along, None
        if taken is None or not self._slots.hand_over(taken, None):
            self._slots.release()

    async def _pooled(self, attempt: AttemptState) -> aiosmtplib.SMTP | None:
        """An idle connection in a clean state (RSET if needed), if there is one."""
        while self._idle:
            smtp, dirty = self._idle.pop()
            attempt.smtp = smtp
            if smtp.is_connected and (not dirty or await _reset(smtp)):
                return smtp
            discard(smtp)
        return None

    async def _open(self, attempt: AttemptState) -> aiosmtplib.SMTP:
        """Connect, EHLO, STARTTLS (+ EHLO), AUTH."""
        settings = self._settings
        implicit = settings.tls is TlsMode.IMPLICIT
        if cleartext_auth_refused(settings):
            raise Abort(SendOutcome(Stage.AUTH, failure=Failure.CLEARTEXT_AUTH,
                                     detail=_CLEARTEXT_AUTH))
        if self._hostname is None:
            self._hostname = await asyncio.to_thread(ehlo_name, settings)
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
        attempt.reply = reply_of(await smtp.connect())
        keep_replies(smtp)
        log.debug("opened SMTP connection to %s:%d", settings.host, settings.port,
                  extra={"event": "smtp_connected", "host": settings.host,
                         "port": settings.port})
        attempt.stage = Stage.EHLO
        attempt.reply = reply_of(await smtp.ehlo())
        if settings.tls is TlsMode.STARTTLS:
            await self._starttls(smtp, attempt)
        if settings.username is not None:
            attempt.stage = Stage.AUTH
            if not smtp.supports_extension("auth"):
                raise Abort(SendOutcome(Stage.AUTH, failure=Failure.AUTH_NOT_OFFERED,
                                         detail="SMTP_USER is set but the server offers no AUTH"))
            attempt.reply = reply_of(await self._auth(smtp))
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
                raise Abort(replace(refused, detail=detail))
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

    async def _starttls(self, smtp: aiosmtplib.SMTP, attempt: AttemptState) -> None:
        attempt.stage = Stage.STARTTLS
        if not smtp.supports_extension("starttls"):
            detail = "server does not offer STARTTLS, which is required"
            raise Abort(SendOutcome(Stage.STARTTLS, failure=Failure.TLS, detail=detail))
        await smtp.starttls(server_hostname=self._settings.host, tls_context=self._tls)
        keep_replies(smtp)  # the TLS transport talks to aiosmtplib's protocol directly
        attempt.reply = reply_of(await smtp.ehlo())

    def _release(self, smtp: aiosmtplib.SMTP | None, outcome: SendOutcome | None) -> None:
        """Pool the connection if its state is known and clean (or cleanable by RSET)."""
        if smtp is None:
            return
        if outcome is None or self._closed or not smtp.is_connected or not _reusable(outcome):
            discard(smtp)
            return
        needs_rset = outcome.failure is not None and outcome.stage in _OPEN_TRANSACTION
        self._idle.append((smtp, needs_rset))


async def answers_tls(settings: SmtpSettings) -> bool:
    """Whether the server completes a TLS handshake on the configured port: told apart
    by the symptom, not the port number. Only the handshake: nothing is sent, and the
    certificate is not judged (the real connection, once configured, verifies it)."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(min(settings.timeout, TLS_PROBE_SECONDS)):
            _, writer = await asyncio.open_connection(settings.host, settings.port, ssl=probe)
    except (OSError, TimeoutError, ssl.SSLError):
        return False
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return True


async def check_connection(settings: SmtpSettings) -> SendOutcome:
    """Connect, EHLO, STARTTLS, AUTH and QUIT without sending anything.

    All well: an accepted outcome at the last stage done (AUTH, else STARTTLS,
    else EHLO) holding that stage's reply.
    """
    transport = SmtpTransport(settings)
    attempt = AttemptState()

    async def probe() -> SendOutcome:
        await transport._open(attempt)
        return SendOutcome(attempt.stage, reply=attempt.reply)

    try:
        return await transport._run(attempt, probe())
    finally:
        if attempt.smtp is not None:
            await _quit(attempt.smtp)


AUTH_REPLY_REDACTED = "(AUTH reply text not kept)"
_CLEARTEXT_AUTH = ("refusing to send the password without TLS to a host that is not "
                   "loopback (set SMTP_TLS, or SMTP_ALLOW_PLAINTEXT_AUTH=true on a trusted "
                   "network)")
async def _authenticate(smtp: aiosmtplib.SMTP, username: str, password: str) -> SMTPResponse:
    """One AUTH exchange (never several: failures count towards lockouts), in order of
    preference among the advertised mechanisms; PLAIN if none is advertised."""
    methods = {"plain": smtp.auth_plain, "login": smtp.auth_login, "cram-md5": smtp.auth_crammd5}
    mechanism = next((m for m in methods if m in smtp.server_auth_methods), "plain")
    return await methods[mechanism](username, password)


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


async def _quit(smtp: aiosmtplib.SMTP) -> None:
    with contextlib.suppress(SMTPException, OSError, TimeoutError):
        if smtp.is_connected:
            async with asyncio.timeout(QUIT_TIMEOUT):
                await smtp.quit()
    discard(smtp)
