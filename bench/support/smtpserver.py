"""A real SMTP server for tests: aiosmtpd on 127.0.0.1, in its own event-loop thread.

Use it as a context manager (``with SmtpTestServer() as server: ...``) or through the
fixtures in :mod:`tests.support.fixtures`. Nothing is mocked: clients talk SMTP over
TCP to ``server.host:server.port``. Every accepted message is recorded in
``server.messages`` (:class:`ReceivedMessage`); ``server.connections`` counts TCP
connections, ``server.auth_failures`` refused AUTH exchanges, ``server.dedup_hits``
duplicates swallowed in dedup mode and
``server.faults_fired`` injected faults.

Fault tokens
------------
Put a token in an address's local part, delimited by its start or end, ``+`` or
``.`` (``rcpt-550@example.com``, ``bob+body-451-once@example.com``):

=================  =============================================================
``mail-NNN``       reply NNN to MAIL FROM. Read from the *sender* address: the
                   recipient is not known yet at MAIL.
``rcpt-NNN``       reply NNN to RCPT TO
``data-NNN``       reply NNN to the DATA command, instead of 354
``body-NNN``       read the content, then reply NNN after the final "." (the
                   message is not recorded)
``drop-before-dot``  send 354, then close the connection without reading content
``drop-after-dot``   read the content, record the message, close without a reply
                     (the "accepted but the reply was lost" case)
``slow-after-dot``   read the content, record it, wait ``server.slow_delay``
                     seconds (2 s by default), then reply 250
=================  =============================================================

Any token may end in ``-once`` or ``-xN``: it then fires only the first 1 or N
times that address is seen at that stage (``rcpt-451-once``: temporary failure
on the first attempt, accepted on the second). Default reply texts carry an
enhanced status code (550 gives ``5.1.1``, 552 ``5.3.4``...). A 421 reply also
closes the connection, as a real server does.

The same faults can be set from the test with :meth:`SmtpTestServer.fail`
(explicit rules are looked at before tokens)::

    server.fail("a@example.com", Stage.RCPT, 451, times=1)
    server.fail("a@example.com", Stage.BODY, drop=True)      # drop after the dot
    server.fail("a@example.com", Stage.DATA, drop=True)      # 354, then drop
    server.fail("a@example.com", Stage.BODY, delay=3.0)      # slow final reply

Server-wide switches (they apply to connections opened afterwards): ``greeting``
(e.g. ``"421 4.3.2 Try later"``: sent instead of the 220, then the connection is
closed), ``auth`` ((user, password) required before MAIL; wrong credentials get
``535 5.7.8``), ``auth_require_tls`` (False allows AUTH without TLS),
``pipelining`` (offer PIPELINING, on by default; ``server.pipelined`` counts
the MAIL commands that arrived together with their RCPT, ``server.mail_behind_data``
those that arrived with the previous message's end of data), ``data_without_rcpt``
(answer DATA with 354 although every recipient was refused; ``server.empty_data``
counts the lone dots that follow), ``tls_context`` (offer STARTTLS; with
``implicit_tls=True`` at construction, TLS from the first byte instead),
``require_starttls``, ``dedup`` (a message whose Message-ID or Idempotency-Key
header was already accepted gets 250 but is not recorded again) and ``slow_delay``.
:meth:`~SmtpTestServer.stop_listening` and :meth:`~SmtpTestServer.start_listening`
simulate an outage on the same port.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email import policy
from email.parser import BytesHeaderParser
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, TypeVar

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

from mailout.transports.smtp.outcome import Stage

_T = TypeVar("_T")
NO_RECIPIENT = "<no valid recipient>"  # see SmtpTestServer.data_without_rcpt

DEFAULT_TEXTS = {
    421: "4.3.2 Service shutting down",
    450: "4.2.1 Mailbox busy",
    451: "4.3.0 Local error in processing",
    452: "4.2.2 Mailbox full",
    535: "5.7.8 Authentication credentials invalid",
    550: "5.1.1 Mailbox does not exist",
    551: "5.1.6 User not local",
    552: "5.3.4 Message too big",
    553: "5.1.3 Bad address syntax",
    554: "5.6.0 Transaction failed",
}
_DELIMITED = r"(?:^|(?<=[+.]))({body})(?:-(once|x\d+))?(?=$|[+.])"
_TOKEN = re.compile(_DELIMITED.format(body=r"(mail|rcpt|data|body)-([245]\d\d)"))
_NAMED_TOKEN = re.compile(_DELIMITED.format(body=r"drop-before-dot|drop-after-dot|slow-after-dot"))
_STAGES = {"mail": Stage.MAIL, "rcpt": Stage.RCPT, "data": Stage.DATA, "body": Stage.BODY}
SLOW = -1.0  # Fault.delay placeholder: use the server's slow_delay


@dataclass(frozen=True)
class ReceivedMessage:
    """One message the server accepted (and, in dedup mode, had not seen before)."""

    mail_from: str
    rcpt_tos: tuple[str, ...]
    data: bytes  # the content as received, dot-stuffing undone
    message_id: str | None
    idempotency_key: str | None
    received_at: datetime  # UTC
    tls: bool  # whether it came over TLS (STARTTLS or implicit)
    auth_user: str | None


@dataclass(frozen=True)
class Fault:
    """What to do at one stage: reply ``code``, and/or ``delay`` first, or ``drop``.

    ``drop`` at DATA sends the 354 first; at BODY it happens after the content was
    read. At BODY, ``deliver`` says whether a drop or delay records the message.
    """

    stage: Stage
    code: int | None = None
    text: str | None = None
    drop: bool = False
    delay: float = 0.0
    times: int | None = None  # fire only this many times; None: always
    deliver: bool = True

    def status(self) -> str | None:
        if self.code is None:
            return None
        fallback = f"{self.code // 100}.0.0 Injected failure"
        return f"{self.code} {self.text or DEFAULT_TEXTS.get(self.code, fallback)}"


def parse_tokens(address: str) -> list[Fault]:
    """The faults named by tokens in an address's local part."""
    local = address.rpartition("@")[0] or address
    faults = [
        Fault(_STAGES[m.group(2)], code=int(m.group(3)), times=_times(m.group(4)))
        for m in _TOKEN.finditer(local)
    ]
    for m in _NAMED_TOKEN.finditer(local):
        times = _times(m.group(2))
        if m.group(1) == "drop-before-dot":
            faults.append(Fault(Stage.DATA, drop=True, times=times))
        elif m.group(1) == "drop-after-dot":
            faults.append(Fault(Stage.BODY, drop=True, times=times))
        else:
            faults.append(Fault(Stage.BODY, delay=SLOW, times=times))
    return faults


def _times(suffix: str | None) -> int | None:
    if suffix is None:
        return None
    return 1 if suffix == "once" else int(suffix[1:])


@dataclass
class _Rule:
    fault: Fault
    remaining: int | None = field(default=None)


class SmtpTestServer:
    """An aiosmtpd server with fault injection; see the module docstring."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls_context: ssl.SSLContext | None = None,
        implicit_tls: bool = False,
        require_starttls: bool = False,
        auth: tuple[str, str] | None = None,
        auth_require_tls: bool = True,
        dedup: bool = False,
        slow_delay: float = 2.0,
        ca_file: Path | None = None,
        pipelining: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self.tls_context = tls_context
        self.implicit_tls = implicit_tls  # TLS from the first byte, no STARTTLS
        self.require_starttls = require_starttls
        self.auth = auth
        self.auth_require_tls = auth_require_tls
        self.dedup = dedup
        self.slow_delay = slow_delay
        self.ca_file = ca_file  # the CA a client must trust (set by the fixtures)
        # Offer PIPELINING in EHLO, as Postfix, Exim and the big providers do;
        # ``pipelined`` counts MAIL commands that arrived with their RCPT behind them.
        self.pipelining = pipelining
        self.pipelined = 0
        # MAIL commands that arrived in the same read as the previous message's end of
        # data: the client took a send along behind another's content.
        self.mail_behind_data = 0
        # Misbehave as RFC 2920 3.1 warns: answer DATA with 354 although every
        # recipient was refused. ``empty_data`` counts the lone "." that then came.
        self.data_without_rcpt = False
        self.empty_data = 0
        self.greeting: str | None = None
        # Hooks for crash and chaos tests. ``fault_hook(addresses, stage)`` picks a fault
        # when no rule or token did; ``before_reply(message)`` runs (in a thread) after a
        # message was recorded and before its 250 reply is sent.
        self.fault_hook: Callable[[tuple[str, ...], Stage], Fault | None] | None = None
        self.before_reply: Callable[[ReceivedMessage], None] | None = None
        self.connections = 0
        self.ehlo_names: list[str] = []  # the name each EHLO gave, in order
        self.disconnected_at: list[datetime] = []  # UTC, when each connection ended
        self.auth_failures = 0  # AUTH exchanges that were refused
        self.dedup_hits = 0
        self.faults_fired = 0
        self._messages: list[ReceivedMessage] = []
        self._seen: set[tuple[str, str]] = set()
        self._rules: dict[tuple[str, Stage], list[_Rule]] = {}
        self._token_rules: dict[str, list[_Rule]] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._listener: asyncio.Server | None = None
        self._active: set[_FaultySMTP] = set()

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> SmtpTestServer:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="smtp-test-server", daemon=True
        )
        self._thread.start()
        self.start_listening()
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> SmtpTestServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop_listening(self, *, drop_connections: bool = True) -> None:
        """Stop accepting (connects are refused); by default also cut open connections."""
        self._call(self._close_listener(drop_connections))

    def start_listening(self) -> None:
        """Listen (again) on the same port."""
        self._call(self._listen())

    # -- what was received -----------------------------------------------------

    @property
    def messages(self) -> list[ReceivedMessage]:
        with self._lock:
            return list(self._messages)

    def wait_for_messages(self, count: int, timeout: float = 5.0) -> list[ReceivedMessage]:
        """Block until at least ``count`` messages were recorded; raise TimeoutError if not."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._messages) >= count, timeout):
                raise TimeoutError(f"{len(self._messages)} of {count} messages after {timeout}s")
            return list(self._messages)

    def reset(self) -> None:
        """Forget messages, counters, dedup memory and faults."""
        with self._lock:
            self._messages.clear()
            self._seen.clear()
            self._rules.clear()
            self._token_rules.clear()
            self.connections = self.dedup_hits = self.faults_fired = self.pipelined = 0
            self.mail_behind_data = 0
            self.ehlo_names.clear()

    # -- faults ----------------------------------------------------------------

    def fail(
        self,
        address: str,
        stage: Stage,
        code: int | None = None,
        text: str | None = None,
        *,
        drop: bool = False,
        delay: float = 0.0,
        times: int | None = None,
        deliver: bool = True,
    ) -> None:
        """Inject a fault for ``address`` (the sender for MAIL, a recipient otherwise)."""
        if code is None and not drop and not delay:
            raise ValueError("a fault needs a code, drop=True or a delay")
        fault = Fault(stage, code, text, drop, delay, times, deliver)
        with self._lock:
            self._rules.setdefault((address.lower(), stage), []).append(_Rule(fault, times))

    def clear_faults(self) -> None:
        with self._lock:
            self._rules.clear()
            self._token_rules.clear()

    def _fault_for(self, addresses: Iterable[str], stage: Stage) -> Fault | None:
        with self._lock:
            for address in addresses:
                key = address.lower()
                if key not in self._token_rules:
                    self._token_rules[key] = [_Rule(f, f.times) for f in parse_tokens(key)]
                token_rules = [r for r in self._token_rules[key] if r.fault.stage is stage]
                for rule in [*self._rules.get((key, stage), []), *token_rules]:
                    if rule.remaining is None or rule.remaining > 0:
                        if rule.remaining is not None:
                            rule.remaining -= 1
                        self.faults_fired += 1
                        return rule.fault
        hook = self.fault_hook
        fault = hook(tuple(addresses), stage) if hook is not None else None
        if fault is not None:
            with self._lock:
                self.faults_fired += 1
        return fault

    # -- internals (server thread) ---------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        assert self._loop is not None, "server not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _listen(self) -> None:
        if self._listener is not None:
            return
        self._listener = await asyncio.get_running_loop().create_server(
            self._make_protocol,
            self.host,
            self.port,
            reuse_address=True,
            ssl=self.tls_context if self.implicit_tls else None,
        )
        self.port = self._listener.sockets[0].getsockname()[1]

    async def _close_listener(self, drop_connections: bool) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if drop_connections:
            for protocol in list(self._active):
                protocol.abort()
            await asyncio.sleep(0.01)

    async def _shutdown(self) -> None:
        await self._close_listener(drop_connections=True)
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _make_protocol(self) -> _FaultySMTP:
        with self._lock:
            self.connections += 1
        protocol = _FaultySMTP(
            self,
            _Handler(self),
            hostname="mailout-test.localhost",
            ident="mailout test server",
            tls_context=None if self.implicit_tls else self.tls_context,
            require_starttls=self.require_starttls and not self.implicit_tls,
            auth_require_tls=self.auth_require_tls,
            authenticator=self._authenticate,
            enable_SMTPUTF8=True,
            loop=asyncio.get_running_loop(),
        )
        self._active.add(protocol)
        return protocol

    def _authenticate(
        self, server: SMTP, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        ok = (
            self.auth is not None
            and isinstance(data, LoginPassword)
            and (data.login, data.password) == (self.auth[0].encode(), self.auth[1].encode())
        )
        if not ok:
            with self._lock:
                self.auth_failures += 1
        return AuthResult(success=ok, handled=False, auth_data=data.login if ok else None)

    def _record(self, envelope: Any, session: Any) -> tuple[str, ReceivedMessage | None]:
        data = bytes(envelope.original_content or b"")
        headers = BytesHeaderParser(policy=policy.default).parsebytes(data)
        message_id, key = _header(headers, "Message-ID"), _header(headers, "Idempotency-Key")
        ids = {(name, v) for name, v in (("mid", message_id), ("key", key)) if v is not None}
        with self._changed:
            if self.dedup and ids & self._seen:
                self.dedup_hits += 1
                return "duplicate", None
            self._seen |= ids
            login = session.auth_data
            received = ReceivedMessage(
                mail_from=envelope.mail_from,
                rcpt_tos=tuple(envelope.rcpt_tos),
                data=data,
                message_id=message_id,
                idempotency_key=key,
                received_at=datetime.now(UTC),
                tls=session.ssl is not None or self.implicit_tls,
                auth_user=login.decode() if isinstance(login, bytes) else None,
            )
            self._messages.append(received)
            self._changed.notify_all()
            return f"msg-{len(self._messages)}", received


def _header(headers: Any, name: str) -> str | None:
    value = headers.get(name)
    return None if value is None else str(value).strip()


class _FaultySMTP(SMTP):
    """aiosmtpd's SMTP plus greeting override, DATA-command faults and drops."""

    def __init__(self, owner: SmtpTestServer, handler: _Handler, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.owner = owner

    async def _handle_client(self) -> None:
        if self.owner.greeting is None:
            await super()._handle_client()
            return
        await self.push(self.owner.greeting)
        self.close()

    def connection_lost(self, error: Exception | None) -> None:
        self.owner._active.discard(self)
        with self.owner._lock:
            self.owner.disconnected_at.append(datetime.now(UTC))
        super().connection_lost(error)

    async def smtp_DATA(self, arg: str | None) -> None:
        envelope, session = self.envelope, self.session
        if self.owner.data_without_rcpt and envelope and envelope.mail_from \
                and not envelope.rcpt_tos:
            envelope.rcpt_tos.append(NO_RECIPIENT)  # gets aiosmtpd past its own check
        ready = not arg and envelope and envelope.rcpt_tos and session and session.host_name
        fault = self.owner._fault_for(envelope.rcpt_tos, Stage.DATA) if envelope and ready else None
        if fault is None:
            await super().smtp_DATA(arg)
            return
        if fault.drop:
            # Cork the socket so the 354 leaves together with the FIN of the drop:
            # a client can then tell the close came before it sent any content.
            sock = self._raw_socket()
            if sock is not None and hasattr(socket, "TCP_CORK"):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            await self.push("354 End data with <CR><LF>.<CR><LF>")
            await self.drop()
        status = await self.fault_status(fault)
        if status is None:
            await super().smtp_DATA(arg)
        else:
            await self.push(status)

    async def fault_status(self, fault: Fault) -> str | None:
        """Apply a fault's delay and drop; its reply (421 is sent here, then closes)."""
        delay = self.owner.slow_delay if fault.delay == SLOW else fault.delay
        if delay:
            await asyncio.sleep(delay)
        if fault.drop:
            await self.drop()
        status = fault.status()
        if status is not None and fault.code == 421:
            await self.push(status)
            self.close()
            await _forever()
        return status

    def _raw_socket(self) -> Any:
        raw = self._original_transport or self.transport
        return raw.get_extra_info("socket") if raw is not None else None

    async def drop(self) -> NoReturn:
        """Close the connection at once, without a reply."""
        sock = self._raw_socket()
        if sock is not None:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.abort()
        await _forever()

    def close(self) -> None:
        """Close gracefully (pending output is flushed first)."""
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close at once, discarding pending output."""
        if isinstance(self.transport, asyncio.WriteTransport):
            self.transport.abort()


async def _forever() -> NoReturn:
    """Wait to be cancelled (connection_lost cancels the session task)."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


class _Handler:
    """aiosmtpd hooks for MAIL, RCPT and the end of DATA."""

    def __init__(self, owner: SmtpTestServer) -> None:
        self.owner = owner

    async def handle_EHLO(
        self, server: _FaultySMTP, session: Any, envelope: Any, hostname: str,
        responses: list[str],
    ) -> list[str]:
        session.host_name = hostname  # this hook's duty in aiosmtpd's EHLO protocol
        with self.owner._lock:
            self.owner.ehlo_names.append(hostname)
        if self.owner.pipelining:
            responses.insert(-1, "250-PIPELINING")
        return responses

    async def handle_MAIL(
        self, server: _FaultySMTP, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        # What the client sent after MAIL is already read when MAIL is handled only if
        # it did not wait for this reply (aiosmtpd's stream buffer; test-side only).
        if b"RCPT TO" in bytes(getattr(server._reader, "_buffer", b"")).upper():
            with self.owner._lock:
                self.owner.pipelined += 1
        if self.owner.auth is not None and not session.authenticated:
            return "530 5.7.0 Authentication required"
        fault = self.owner._fault_for([address], Stage.MAIL)
        status = await server.fault_status(fault) if fault else None
        if status is not None:
            return status
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 2.1.0 OK"

    async def handle_RCPT(
        self, server: _FaultySMTP, session: Any, envelope: Any, address: str, options: list[str]
    ) -> str:
        fault = self.owner._fault_for([address], Stage.RCPT)
        status = await server.fault_status(fault) if fault else None
        if status is not None:
            return status
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: _FaultySMTP, session: Any, envelope: Any) -> str:
        if bytes(getattr(server._reader, "_buffer", b"")).upper().startswith(b"MAIL FROM"):
            with self.owner._lock:
                self.owner.mail_behind_data += 1
        if envelope.rcpt_tos == [NO_RECIPIENT]:
            with self.owner._lock:
                self.owner.empty_data += not envelope.original_content
            return "554 5.5.1 No valid recipients"
        fault = self.owner._fault_for(envelope.rcpt_tos, Stage.BODY)
        queued, received = "not-recorded", None
        if fault is None or (fault.deliver and (fault.code or 250) < 400):
            queued, received = self.owner._record(envelope, session)
        hook = self.owner.before_reply
        if hook is not None and received is not None:
            await asyncio.to_thread(hook, received)
        status = await server.fault_status(fault) if fault else None
        return status or f"250 2.0.0 OK queued as {queued}"
