"""A peer's reply never drives the operator's terminal (issue 33, item 7).

A server (or anyone on the path before STARTTLS) answers STARTTLS with an OSC
sequence that retitles the terminal. `mailout check`, the worker's text log and its
`mailout: stopped:` line print it written out, never raw.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mailout import db
from mailout.outbox import EnqueueSettings, enqueue
from tests.acceptance.cli.test_main import mailout

POISON = "554 5.7.0 \x1b]0;PWNED\x07 \x9b31m no TLS\r\n"


class PoisonedSmtp:
    """Real SMTP over TCP, scripted: greets, offers STARTTLS, refuses it with POISON."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as lines:
            conn.sendall(b"220 poisoned.example ESMTP\r\n")
            for raw in lines:
                verb = raw.split(b" ", 1)[0].strip().upper()
                if verb in (b"EHLO", b"HELO"):
                    conn.sendall(b"250-poisoned.example\r\n250 STARTTLS\r\n")
                elif verb == b"STARTTLS":
                    conn.sendall(POISON.encode("latin-1"))
                elif verb == b"QUIT":
                    conn.sendall(b"221 bye\r\n")
                    return
                else:
                    conn.sendall(b"503 bad sequence\r\n")

    def __enter__(self) -> PoisonedSmtp:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


@pytest.fixture
def poisoned() -> Iterator[PoisonedSmtp]:
    with PoisonedSmtp() as server:
        yield server


def _env(tmp_path: Path, port: int) -> dict[str, str]:
    return {"MAILOUT_DATABASE_URL": f"sqlite:///{tmp_path / 'outbox.db'}",
            "MAIL_FROM": "shop@example.com", "SMTP_HOST": "127.0.0.1",
            "SMTP_PORT": str(port), "SMTP_TLS": "starttls", "SMTP_TIMEOUT": "5",
            "MAILOUT_PAUSE_SECONDS": "0.2"}


def _assert_written_out(said: str) -> None:
    assert "\x1b" not in said
    assert "\x07" not in said
    assert "\x9b" not in said
    assert "\\x1b]0;PWNED\\x07" in said


def test_check_prints_a_poisoned_reply_written_out(tmp_path: Path,
                                                   poisoned: PoisonedSmtp) -> None:
    env = _env(tmp_path, poisoned.port)
    mailout("db", "upgrade", env=env)
    proc = mailout("check", env=env, expect=1)
    _assert_written_out(proc.stdout + proc.stderr)


@pytest.mark.slow
def test_the_worker_log_and_stopped_line_print_it_written_out(
        tmp_path: Path, poisoned: PoisonedSmtp) -> None:
    env = _env(tmp_path, poisoned.port)
    mailout("db", "upgrade", env=env)
    engine = db.make_engine(env["MAILOUT_DATABASE_URL"])
    with engine.begin() as conn:
        enqueue(conn, to="a@example.com", subject="Hi", text="x", key="k1",
                settings=EnqueueSettings(message_id_domain="example.com"))
    engine.dispose()
    proc = mailout("-v", "worker", "--until-idle", env=env, expect=None)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 3, said  # stopped: the transport cannot send
    assert "mailout: stopped:" in said
    _assert_written_out(said)
