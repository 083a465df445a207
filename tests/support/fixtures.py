"""Shared pytest fixtures; load with ``pytest_plugins = ["tests.support.fixtures"]``.

* ``pg_server_url`` (session): a PostgreSQL server URL, see :mod:`bench.support.pg`.
* ``test_certs`` / ``other_certs`` (session): two unrelated trustme CAs with server
  contexts, see :mod:`bench.support.tls`.
* ``smtp_server``: a plain SMTP test server (no TLS, no AUTH) on a free port.
* ``tls_smtp_server``: STARTTLS offered and required, cert signed by ``test_certs``.
* ``auth_smtp_server``: STARTTLS required and AUTH required, as
  ``AUTH_USER`` / ``AUTH_PASSWORD``. For AUTH over plaintext build
  ``SmtpTestServer(auth=(...), auth_require_tls=False)`` yourself.

``smtp_settings_for(server, **overrides)`` gives ``SmtpSettings`` pointing at a test
server: TLS none for a plain server, STARTTLS (or implicit TLS) + its CA file for a
TLS one, the
server's credentials if it requires AUTH, a 5 s timeout.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.support.pg import postgres_server_url
from bench.support.smtpserver import SmtpTestServer
from bench.support.tls import TestCerts, make_test_certs

from mailout.message.envelope import Envelope
from mailout.models import Mailbox
from mailout.transports.smtp.settings import SmtpSettings, TlsMode

AUTH_USER = "mailer"
AUTH_PASSWORD = "s3cret-Pa55word-do-not-log"  # a test credential


def raw_envelope(sender: str, recipients: str | tuple[str, ...], data: bytes,
                 message_id: str, key: str = "key-1") -> Envelope:
    """An envelope around ready-made wire bytes, for transport-level tests."""
    rcpts = (recipients,) if isinstance(recipients, str) else recipients
    return Envelope(message_id=message_id, idempotency_key=key, sender=Mailbox(sender),
                    to=tuple(Mailbox(r) for r in rcpts), subject="", text=None, html=None,
                    wire_builder=lambda: data)


def smtp_settings_for(server: SmtpTestServer, **overrides: Any) -> SmtpSettings:
    """SmtpSettings for talking to ``server``; keyword arguments override fields."""
    values: dict[str, Any] = {
        "host": server.host,
        "port": server.port,
        "tls": _tls_mode(server),
        "ca_file": server.ca_file,
        "timeout": 5.0,
        "local_hostname": "client.mailout.test",
    }
    if server.auth is not None:
        values["username"], values["password"] = server.auth
    values.update(overrides)
    return SmtpSettings(**values)


def _tls_mode(server: SmtpTestServer) -> TlsMode:
    if server.tls_context is None:
        return TlsMode.NONE
    return TlsMode.IMPLICIT if server.implicit_tls else TlsMode.STARTTLS


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    with postgres_server_url() as url:
        yield url


@pytest.fixture(scope="session")
def test_certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return make_test_certs(Path(tmp_path_factory.mktemp("tls-trusted")))


@pytest.fixture(scope="session")
def other_certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    """A second CA, unrelated to ``test_certs``: for untrusted-certificate tests."""
    return make_test_certs(Path(tmp_path_factory.mktemp("tls-other")))


@pytest.fixture
def smtp_server() -> Iterator[SmtpTestServer]:
    with SmtpTestServer() as server:
        yield server


@pytest.fixture
def tls_smtp_server(test_certs: TestCerts) -> Iterator[SmtpTestServer]:
    with SmtpTestServer(
        tls_context=test_certs.server_context, require_starttls=True, ca_file=test_certs.ca_file
    ) as server:
        yield server


@pytest.fixture
def auth_smtp_server(test_certs: TestCerts) -> Iterator[SmtpTestServer]:
    with SmtpTestServer(
        tls_context=test_certs.server_context,
        require_starttls=True,
        ca_file=test_certs.ca_file,
        auth=(AUTH_USER, AUTH_PASSWORD),
    ) as server:
        yield server
