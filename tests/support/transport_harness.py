"""One harness per transport, for the transport contract suite.

Each harness wraps a real transport and the real thing behind it (the SMTP test
server over TCP for SMTP; for the memory transport, its own outbox), and can make
that provider refuse, defer or lose the reply for one address, so the same tests
drive every transport to every decision. New transports (HTTP providers) add a
harness here and join the suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from mailout.transports.base import Decision, SendResult, Transport
from mailout.transports.memory import MemoryTransport
from mailout.transports.smtp.client import SmtpTransport
from mailout.transports.smtp.outcome import Stage
from mailout.transports.smtp.settings import SmtpSettings, TlsMode
from tests.support.fixtures import smtp_settings_for
from tests.support.smtpserver import SmtpTestServer


@dataclass(frozen=True)
class Delivered:
    """What the provider received: enough to check what the contract promises."""

    message_id: str
    recipients: tuple[str, ...]
    wire: bytes | None  # the RFC 5322 message, where the provider sees one


class Harness(Protocol):
    name: str
    transport: Transport

    def refuse(self, address: str) -> None:
        """Refuse mail to ``address`` for good (a 5yz, an invalid recipient)."""

    def defer(self, address: str) -> None:
        """Refuse mail to ``address`` for now (a 4yz, a rate limit)."""

    def lose_reply(self, address: str) -> None:
        """Take the content for ``address``, then never answer."""

    def delivered(self) -> list[Delivered]:
        """Every message the provider accepted, in order."""

    def misconfigured(self) -> Transport:
        """A transport to the same provider with wrong credentials."""

    def unreachable(self) -> Transport:
        """A transport to a provider that cannot be reached at all."""


class MemoryHarness:
    name = "memory"

    def __init__(self) -> None:
        self.transport: MemoryTransport = MemoryTransport()

    def refuse(self, address: str) -> None:
        self.transport.answer_for(address, SendResult(Decision.FAILED, "recipient_rejected"))

    def defer(self, address: str) -> None:
        self.transport.answer_for(address, SendResult(Decision.RETRY, "transient_reply"))

    def lose_reply(self, address: str) -> None:
        self.transport.answer_for(address, SendResult(Decision.UNKNOWN, "lost_reply"))

    def delivered(self) -> list[Delivered]:
        # The outbox keeps what was sent and what an unknown outcome may have delivered.
        return [Delivered(e.message_id, e.recipients, e.wire) for e in self.transport.outbox]

    def misconfigured(self) -> Transport:
        broken = MemoryTransport()
        broken.answer_always(SendResult(Decision.PAUSE, "bad_credentials"))
        return broken

    def unreachable(self) -> Transport:
        down = MemoryTransport()
        down.answer_always(SendResult(Decision.OUTAGE, "connect_refused"))
        return down


class SmtpHarness:
    name = "smtp"

    def __init__(self, server: SmtpTestServer, settings: SmtpSettings) -> None:
        self.server = server
        self.settings = settings
        self.transport = SmtpTransport(settings)

    def refuse(self, address: str) -> None:
        self.server.fail(address, Stage.RCPT, 550)

    def defer(self, address: str) -> None:
        self.server.fail(address, Stage.RCPT, 451)

    def lose_reply(self, address: str) -> None:
        self.server.fail(address, Stage.BODY, drop=True)

    def delivered(self) -> list[Delivered]:
        return [Delivered(m.message_id or "", m.rcpt_tos, m.data) for m in self.server.messages]

    def misconfigured(self) -> Transport:
        return SmtpTransport(SmtpSettings(**{**self.settings.__dict__,
                                             "password": "not-the-password"}))

    def unreachable(self) -> Transport:
        with SmtpTestServer() as closed:
            port = closed.port  # free now: nothing listens there once the server stops
        return SmtpTransport(SmtpSettings("127.0.0.1", port, tls=TlsMode.NONE, timeout=3.0))


@contextmanager
def harness(name: str, auth_server: SmtpTestServer | None = None) -> Iterator[Harness]:
    """The harness called ``name``; SMTP ones run against ``auth_server``."""
    if name == "memory":
        yield MemoryHarness()
        return
    assert auth_server is not None
    yield SmtpHarness(auth_server, smtp_settings_for(auth_server))
