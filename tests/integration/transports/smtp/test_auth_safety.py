"""AUTH that must not happen, and AUTH replies that must not be kept (issue 14, item 4).

- SMTP_TLS=none with SMTP_USER towards a host that is not loopback: refused before
  connecting (the password would cross the network readably), a pause, and
  ``mailout check`` says so; SMTP_ALLOW_PLAINTEXT_AUTH=true is the way out.
- A server that does not offer AUTH is not sent one: a pause, and check says so.
- The AUTH-stage reply text (which can echo credentials) is not written to the
  attempts table.
"""

from __future__ import annotations

import asyncio
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench.support.workers import run_until_idle
from sqlalchemy import select

from mailout import db
from mailout.db import migrate
from mailout.db.schema import attempts
from mailout.outbox import EnqueueSettings, enqueue
from mailout.support.hosts import is_loopback
from mailout.transports.base import Decision
from mailout.transports.smtp.client import AUTH_REPLY_REDACTED, SmtpTransport
from mailout.transports.smtp.settings import (
    SmtpSettings,
    TlsMode,
    cleartext_auth_refused,
)
from mailout.transports.smtp.settings import from_env as smtp_from_env
from mailout.worker import config
from tests.support.envelopes import full_envelope

SECRET_ECHO = "dXNlcjpodW50ZXIy"  # what a careless server echoes back: base64 of user:pass


class _PlainServer(socketserver.StreamRequestHandler):
    """A permissive SMTP server: 250 to everything, records each command line."""

    commands: list[str]
    offer_auth = False

    def handle(self) -> None:
        self.wfile.write(b"220 sink ESMTP\r\n")
        while line := self.rfile.readline():
            command = line.decode("ascii", "replace").rstrip("\r\n")
            self.commands.append(command)
            verb = command.split(" ", 1)[0].upper()
            if verb == "EHLO":
                extra = b"250-AUTH PLAIN LOGIN\r\n" if self.offer_auth else b""
                self.wfile.write(b"250-sink\r\n" + extra + b"250 8BITMIME\r\n")
            elif verb == "AUTH":
                self.wfile.write(f"535 5.7.8 bad credentials {SECRET_ECHO}\r\n".encode())
            elif verb == "DATA":
                self.wfile.write(b"354 go on\r\n")
                while self.rfile.readline() not in (b".\r\n", b""):
                    pass
                self.wfile.write(b"250 2.0.0 queued\r\n")
            elif verb == "QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"250 ok\r\n")


def _serve(offer_auth: bool) -> Iterator[tuple[int, list[str]]]:
    commands: list[str] = []
    handler: Any = type("Handler", (_PlainServer,), {"commands": commands,
                                                     "offer_auth": offer_auth})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], commands
    server.shutdown()
    server.server_close()


@pytest.fixture
def no_auth_server() -> Iterator[tuple[int, list[str]]]:
    yield from _serve(offer_auth=False)


@pytest.fixture
def echoing_auth_server() -> Iterator[tuple[int, list[str]]]:
    yield from _serve(offer_auth=True)


def _settings(port: int, host: str = "127.0.0.1", **kw: Any) -> SmtpSettings:
    return SmtpSettings(host=host, port=port, username="user", password="hunter2",
                        tls=TlsMode.NONE, timeout=3.0, local_hostname="client.test", **kw)


async def _send_then_check(settings: SmtpSettings) -> tuple[Any, Any]:
    """One send and one ``check()`` through a fresh transport: (SendResult, CheckResult)."""
    transport = SmtpTransport(settings)
    try:
        return await transport.send(full_envelope()), await transport.check()
    finally:
        await transport.close()


def test_auth_in_clear_to_a_remote_host_is_refused_before_connecting() -> None:
    # 192.0.2.0/24 is TEST-NET-1: nothing answers there, and nothing is asked to.
    settings = _settings(2525, host="192.0.2.10")
    result, checked = asyncio.run(_send_then_check(settings))
    assert (result.decision, result.reason) == (Decision.PAUSE, "cleartext_auth")
    assert not checked.ok
    assert "SMTP_ALLOW_PLAINTEXT_AUTH" in checked.line
    assert "hunter2" not in checked.line


def test_only_loopback_or_the_setting_allows_auth_in_clear() -> None:
    for host in ("localhost", "127.0.0.1", "::1", "[::1]", "mail.localhost"):
        assert is_loopback(host)
        assert not cleartext_auth_refused(_settings(25, host=host))
    for host in ("mail.example.com", "10.0.0.5", "192.0.2.1"):
        assert not is_loopback(host)
        assert cleartext_auth_refused(_settings(25, host=host))
        assert not cleartext_auth_refused(_settings(25, host=host, allow_plaintext_auth=True))
    parsed = smtp_from_env({"SMTP_HOST": "relay.internal", "SMTP_TLS": "none",
                            "SMTP_USER": "u", "SMTP_PASS": "p",
                            "SMTP_ALLOW_PLAINTEXT_AUTH": "true"}, pool_size=1)
    assert parsed.allow_plaintext_auth
    assert not cleartext_auth_refused(parsed)


def test_auth_the_server_does_not_offer_is_not_sent(
    no_auth_server: tuple[int, list[str]],
) -> None:
    port, commands = no_auth_server
    settings = _settings(port)
    result, checked = asyncio.run(_send_then_check(settings))
    assert (result.decision, result.reason) == (Decision.PAUSE, "auth_not_offered")
    assert not any(c.upper().startswith("AUTH") for c in commands), commands
    assert not any(c.upper().startswith("MAIL") for c in commands), commands
    assert not checked.ok
    assert "offers no AUTH" in checked.line


def test_the_auth_reply_text_is_not_written_to_the_attempts_table(
    echoing_auth_server: tuple[int, list[str]], tmp_path: Path,
) -> None:
    port, _commands = echoing_auth_server
    url = f"sqlite:///{tmp_path / 'auth.db'}"
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    with engine.begin() as conn:
        enqueue(conn, to="ann@example.com", subject="Hi", text="Hello",
                settings=EnqueueSettings(message_id_domain="example.com"))
    settings = config.load(env={
        "MAILOUT_DATABASE_URL": url, "MAIL_FROM": "shop@example.com", "SMTP_HOST": "127.0.0.1",
        "SMTP_PORT": str(port), "SMTP_TLS": "none", "SMTP_USER": "user",
        "SMTP_PASS": "hunter2", "SMTP_TIMEOUT": "3", "MAILOUT_POLL_SECONDS": "0.1",
    })
    run_until_idle(settings)
    with engine.connect() as conn:
        rows = conn.execute(select(attempts.c.stage, attempts.c.reply_code,
                                   attempts.c.reply_text, attempts.c.detail)).all()
    engine.dispose()
    assert rows, "the worker made no attempt"
    stage, code, text, detail = rows[0]
    assert (stage, code) == ("auth", 535)
    assert text == AUTH_REPLY_REDACTED
    assert SECRET_ECHO not in (detail or "")
