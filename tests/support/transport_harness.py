"""One harness per transport, for the transport contract suite.

Each harness wraps a real transport and the real thing behind it (the SMTP test
server over TCP for SMTP; for the memory transport, its own outbox), and can make
that provider refuse, defer or lose the reply for one address, so the same tests
drive every transport to every decision. New transports (HTTP providers) add a
harness here and join the suite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote

from bench.common import free_port
from bench.support.providers.brevo import FakeBrevo
from bench.support.providers.mailgun import FakeMailgun
from bench.support.providers.postmark import FakePostmark
from bench.support.providers.resend import FakeResend
from bench.support.providers.sendgrid import FakeSendGrid
from bench.support.providers.server import FakeProvider
from bench.support.providers.ses import FakeSes
from bench.support.smtpserver import SmtpTestServer

from mailout.transports import url as transport_url
from mailout.transports.base import Decision, SendResult, Transport
from mailout.transports.brevo import key_uuid
from mailout.transports.memory import MemoryTransport
from mailout.transports.smtp.client import SmtpTransport
from mailout.transports.smtp.outcome import Stage
from mailout.transports.smtp.settings import SmtpSettings, TlsMode
from tests.support.fixtures import smtp_settings_for


@dataclass(frozen=True)
class Delivered:
    """What the provider received: enough to check what the contract promises."""

    message_id: str
    recipients: tuple[str, ...]
    wire: bytes | None  # the RFC 5322 message, where the provider sees one
    headers: Mapping[str, str] = field(default_factory=dict)  # custom headers, HTTP APIs
    key: str | None = None  # the idempotency key in the provider's own field, if any


class Harness(Protocol):
    name: str
    transport: Transport
    native_key: Callable[[str], str | None]  # mailout's key -> what the provider receives
    carries_message_id: bool  # False where the provider sets its own Message-ID

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


def _no_key(key: str) -> str | None:
    return None


class MemoryHarness:
    name = "memory"
    native_key = staticmethod(_no_key)
    carries_message_id = True

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
    native_key = staticmethod(_no_key)
    carries_message_id = True

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


def provider_url(name: str, secret: str, endpoint: str, **query: str) -> str:
    """The ``MAILOUT_TRANSPORT`` URL of an HTTP provider at ``endpoint``."""
    params = "".join(f"&{k}={v}" for k, v in query.items())
    secret = quote(secret, safe="")  # as a user must write a secret holding / or +
    netloc = {"mailgun": f"{secret}@mg.example.com",
              "ses": f"AKIDEXAMPLE:{secret}@us-east-1"}.get(name, secret)
    return f"{name}://{netloc}?endpoint={endpoint}{params}"


def build(url: str) -> Transport:
    return transport_url.parse(url, {}, concurrency=4).build(4)


class HttpHarness:
    """A real HTTP transport against a local fake of its provider."""

    def __init__(self, fake: FakeProvider, native_key: Callable[[str], str | None],
                 carries_message_id: bool) -> None:
        self.fake = fake
        self.name = fake.name
        self.native_key = native_key
        self.carries_message_id = carries_message_id
        self.transport = build(provider_url(fake.name, fake.secret, fake.url, timeout="3"))

    def refuse(self, address: str) -> None:
        self.fake.refuse(address)

    def defer(self, address: str) -> None:
        self.fake.defer(address)

    def lose_reply(self, address: str) -> None:
        self.fake.lose(address)

    def delivered(self) -> list[Delivered]:
        return [Delivered(d.message_id or "", d.recipients, None, d.headers, d.key)
                for d in self.fake.delivered]

    def misconfigured(self) -> Transport:
        return build(provider_url(self.name, "wrong-" + self.fake.secret, self.fake.url))

    def unreachable(self) -> Transport:
        return build(provider_url(self.name, self.fake.secret,
                                  f"http://127.0.0.1:{free_port()}", timeout="3"))


def _same(key: str) -> str | None:
    return key


# name -> (the fake, what the provider receives as the key, whether it keeps our Message-ID)
FAKES: dict[str, tuple[Callable[[], FakeProvider], Callable[[str], str | None], bool]] = {
    "resend": (FakeResend, _same, True),
    "postmark": (FakePostmark, _no_key, True),
    "brevo": (FakeBrevo, key_uuid, False),
    "sendgrid": (FakeSendGrid, _no_key, False),
    "mailgun": (FakeMailgun, _no_key, True),
    "ses": (FakeSes, _no_key, True),
}


class FailoverHarness:
    """``failover(resend, postmark)`` over both fakes: the primary takes every message
    while it works, so the faults are set on it; misconfigured and unreachable mean
    every member is."""

    name = "failover"
    native_key = staticmethod(_same)
    carries_message_id = True

    def __init__(self, a: FakeResend, b: FakePostmark) -> None:
        self.a, self.b = a, b
        self.transport = build(self._url(a.secret, b.secret, a.url, b.url))

    @staticmethod
    def _url(secret_a: str, secret_b: str, url_a: str, url_b: str) -> str:
        return (f"failover({provider_url('resend', secret_a, url_a, timeout='3')}, "
                f"{provider_url('postmark', secret_b, url_b, timeout='3')})")

    def refuse(self, address: str) -> None:
        self.a.refuse(address)

    def defer(self, address: str) -> None:
        self.a.defer(address)

    def lose_reply(self, address: str) -> None:
        self.a.lose(address)

    def delivered(self) -> list[Delivered]:
        return [Delivered(d.message_id or "", d.recipients, None, d.headers, d.key)
                for d in (*self.a.delivered, *self.b.delivered)]

    def misconfigured(self) -> Transport:
        return build(self._url("wrong", "wrong", self.a.url, self.b.url))

    def unreachable(self) -> Transport:
        down = f"http://127.0.0.1:{free_port()}"
        return build(self._url(self.a.secret, self.b.secret, down, down))


@contextmanager
def harness(name: str, auth_server: SmtpTestServer | None = None) -> Iterator[Harness]:
    """The harness called ``name``; SMTP ones run against ``auth_server``."""
    if name == "memory":
        yield MemoryHarness()
        return
    if name == "failover":
        with FakeResend() as a, FakePostmark() as b:
            yield FailoverHarness(a, b)
            assert a.violations == b.violations == []
        return
    if name in FAKES:
        make, native_key, carries = FAKES[name]
        with make() as fake:
            yield HttpHarness(fake, native_key, carries)
            assert fake.violations == [], fake.violations
        return
    assert auth_server is not None
    yield SmtpHarness(auth_server, smtp_settings_for(auth_server))
