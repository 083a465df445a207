"""Rollout and review commands as a user runs them: pause, resume, resolve, report,
and the worker's --processes and --lanes options."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import worker_env
from sqlalchemy import func, select, update

from mailout import db
from mailout.db import migrate
from mailout.db.schema import messages
from mailout.outbox import EnqueueSettings, enqueue
from tests.acceptance.cli.test_main import MAILOUT, clean_env, mailout, mailout_json

pytestmark = pytest.mark.slow  # the mailout executable and worker processes

SETTINGS = EnqueueSettings(message_id_domain="cli.example.com")


def _db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


def test_pause_shows_in_status_and_holds_mail_until_resume(
    tmp_path: Path, smtp_server: SmtpTestServer
) -> None:
    url = _db(tmp_path)
    env = worker_env(url, smtp_server)
    mailout("pause", "--queue", "bulk", "--reason", "provider throttling", env=env)
    status = mailout_json("status", env=env)
    assert status["paused"][0]["name"] == "bulk"
    assert status["paused"][0]["reason"] == "provider throttling"
    assert "paused" in mailout("status", env=env).stdout
    mailout("enqueue", "--to", "a@example.com", "--subject", "News", "--text", "x",
            "--queue", "bulk", env=env)
    mailout("worker", "--until-idle", env=env)
    assert smtp_server.messages == []
    assert mailout_json("status", env=env)["totals"]["pending"] == 1
    assert "resumed" in mailout("resume", "--queue", "bulk", env=env).stdout
    mailout("worker", "--until-idle", env=env)
    assert len(smtp_server.messages) == 1
    bad = mailout("pause", "--queue", "a", "--template", "b", env=env, expect=2)
    assert "exactly one" in bad.stderr


def test_resolve_settles_unknown_rows(tmp_path: Path, smtp_server: SmtpTestServer) -> None:
    url = _db(tmp_path)
    env = worker_env(url, smtp_server, MAILOUT_ON_UNKNOWN="hold")
    engine = db.make_engine(url)
    with engine.begin() as conn:
        lost = enqueue(conn, to="drop-after-dot@example.com", subject="Hi", text="x",
                       settings=SETTINGS).id
        other = enqueue(conn, to="drop-after-dot+2@example.com", subject="Hi", text="x",
                        settings=SETTINGS).id
    mailout("worker", "--until-idle", env=env, expect=5)  # some fail: exit 5
    assert mailout_json("status", env=env)["totals"]["unknown"] == 2
    out = mailout("resolve", str(lost), "--sent", "--provider-id", "PROV-1", env=env).stdout
    assert f"marked sent 1: {lost}" in out
    assert mailout_json("trace", "PROV-1", env=env)["id"] == lost
    mailout("resolve", str(other), "--retry", env=env)
    with engine.connect() as conn:
        assert conn.execute(select(messages.c.status).where(messages.c.id == other)
                            ).scalar_one() == "pending"
    skipped = mailout("resolve", str(lost), "--retry", env=env).stdout
    assert "skipped 1" in skipped
    mailout("resolve", str(lost), env=env, expect=2)
    engine.dispose()


def test_report_counts_match_the_rows(tmp_path: Path, smtp_server: SmtpTestServer) -> None:
    url = _db(tmp_path)
    env = worker_env(url, smtp_server)
    engine = db.make_engine(url)
    with engine.begin() as conn:
        for i in range(3):
            enqueue(conn, to=f"u{i}@example.com", subject="Hi", text="x", settings=SETTINGS)
        enqueue(conn, to="rcpt-550@example.com", subject="Hi", text="x", settings=SETTINGS)
        gone = enqueue(conn, to="later@example.com", subject="Hi", text="x", queue="bulk",
                       settings=SETTINGS).id
    mailout("cancel", str(gone), env=env)
    mailout("worker", "--until-idle", env=env, expect=5)  # some fail: exit 5
    rows = {(r["template"], r["queue"]): r for r in mailout_json("report", "--since", "1h",
                                                                 env=env)}
    default = rows[("(pre-rendered)", "default")]
    assert (default["enqueued"], default["sent"], default["failed"]) == (4, 3, 1)
    assert default["median_seconds_to_send"] is not None
    assert rows[("(pre-rendered)", "bulk")]["cancelled"] == {"operator": 1}
    assert "enqueued" in mailout("report", env=env).stdout
    with engine.begin() as conn:  # older than the window: not counted
        conn.execute(update(messages).values(created_at=datetime(2020, 1, 1, tzinfo=UTC)))
    assert mailout_json("report", "--since", "1h", env=env) == []
    engine.dispose()


def test_worker_processes_and_lanes(tmp_path: Path, smtp_server: SmtpTestServer) -> None:
    url = _db(tmp_path)
    env = worker_env(url, smtp_server)
    engine = db.make_engine(url)
    with engine.begin() as conn:
        for i in range(20):
            enqueue(conn, to=f"u{i}@example.com", subject="Hi", text="x",
                    queue="critical" if i % 2 else "bulk", settings=SETTINGS)
    engine.dispose()
    mailout("worker", "--processes", "2", "--lanes", "critical:2,bulk:2", "--until-idle",
            env=env)
    assert len({m.message_id for m in smtp_server.messages}) == 20
    bad = mailout("worker", "--lanes", "critical", env=env, expect=1)
    assert "MAILOUT_LANES" in bad.stderr
    assert "concurrency" in bad.stderr


def test_worker_lanes_pinned_to_processes_of_their_own(
    tmp_path: Path, smtp_server: SmtpTestServer
) -> None:
    # critical:2@1 runs alone in one process, bulk:2@2 in two others: three children
    # drain both queues, each message once.
    url = _db(tmp_path)
    env = worker_env(url, smtp_server)
    engine = db.make_engine(url)
    with engine.begin() as conn:
        for i in range(30):
            enqueue(conn, to=f"u{i}@example.com", subject="Hi", text="x",
                    queue="critical" if i % 3 == 0 else "bulk", settings=SETTINGS)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(messages)).scalar_one() == 30
    engine.dispose()
    mailout("worker", "--lanes", "critical:2@1,bulk:2@2", "--until-idle", env=env)
    ids = [m.message_id for m in smtp_server.messages]
    assert (len(ids), len(set(ids))) == (30, 30)
    bad = mailout("worker", "--processes", "2", "--lanes", "critical:2@1", "--until-idle",
                  env=env, expect=2)
    assert "no lane left to run" in bad.stderr


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""


def test_worker_processes_keep_the_database_password_off_their_command_lines(
    pg_url: str, smtp_server: SmtpTestServer
) -> None:
    # trust auth ignores the password, so the URL works while carrying a secret that
    # must not show in `ps` for the children the supervisor starts.
    secret = "Zq9-db-secret-4410"
    url = pg_url.replace("postgres@", f"postgres:{secret}@", 1)
    assert secret in url
    env = worker_env(url, smtp_server)
    del env["MAILOUT_DATABASE_URL"]  # given as --db, as a user would on the command line
    # Its own session: if the supervisor failed to stop its children, the test kills
    # them all (a worker left running would drain the next tests' rows).
    proc = subprocess.Popen([MAILOUT, "--db", url, "worker", "--processes", "2"],
                            env=clean_env(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        supervisor = _cmdline(proc.pid)
        deadline = time.monotonic() + 60
        # A child between fork and exec still shows the supervisor's command line:
        # only children that have become workers count.
        while time.monotonic() < deadline and len(
                [c for c in _children(proc.pid) if _cmdline(c) not in (b"", supervisor)]) < 2:
            time.sleep(0.1)
        children = _children(proc.pid)
        assert len(children) == 2
        for child in children:
            cmdline = _cmdline(child)
            assert b"worker" in cmdline
            assert secret.encode() not in cmdline
            assert b"--db" not in cmdline
            # The child still reads the right database, from its own environment.
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
            assert f"MAILOUT_DATABASE_URL={url}".encode() in environ
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    # (The exit code is not this test's subject: a child stopped while still importing
    # ends by the signal.)
    assert secret.encode() not in err


def test_a_stop_signal_while_children_start_stops_every_child(
    pg_url: str, smtp_server: SmtpTestServer
) -> None:
    """SIGTERM as soon as the first child exists (the supervisor may still be starting
    the second): the supervisor forwards it to every child it starts and exits, and no
    worker is left running."""
    proc = subprocess.Popen([MAILOUT, "worker", "--processes", "2"],
                            env=clean_env(worker_env(pg_url, smtp_server)),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _children(proc.pid):
            time.sleep(0.005)
        assert _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _group_alive(proc.pid):
            time.sleep(0.1)
        assert not _group_alive(proc.pid)  # every child stopped too
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
