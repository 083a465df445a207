"""Provider outages and configuration errors, with real processes and a real SMTP server.

An outage (nothing listens, or the server answers 421 at the greeting) must show as
pending messages, never as dead ones: attempts that meet it are logged but not
charged, the worker probes with one message, and everything goes out once the
provider is back. Only a message's age limit can kill it meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.tls import TestCerts
from bench.support.workers import settings_for, spawn_worker, worker_env
from sqlalchemy import Engine, func, select

from mailout.db.schema import attempts, messages
from mailout.outbox import EnqueueSettings, enqueue
from mailout.support.alerts import Alert
from mailout.transports.base import Decision
from mailout.transports.smtp.classify import IMPLICIT_TLS_PORT
from mailout.transports.smtp.client import SmtpTransport
from mailout.transports.smtp.settings import TlsMode
from mailout.worker.build import build_worker
from tests.support.fixtures import raw_envelope, smtp_settings_for

SETTINGS = EnqueueSettings(message_id_domain="test.example.com",
                           queue_max_age={"short": 1.5})
# Attempt limits scaled down: without the outage rules every message would be dead
# after its 2 attempts, well within a second.
FAST = {
    "MAILOUT_MAX_ATTEMPTS": 2, "MAILOUT_RETRY_BASE_SECONDS": 0.05,
    "MAILOUT_RETRY_CAP_SECONDS": 0.2, "MAILOUT_OUTAGE_PROBE_SECONDS": 0.1,
    "MAILOUT_OUTAGE_PROBE_CAP_SECONDS": 0.4, "MAILOUT_CONCURRENCY": 4,
}
OUTAGE_ATTEMPTS = 2 * 2 + 1  # failed sends an outage lasts for: past two messages' budgets
EXIT_TRANSPORT_DOWN = 3


def add(engine: Engine, n: int, queue: str = "default") -> list[int]:
    with engine.begin() as conn:
        return [enqueue(conn, to=f"user{i}@example.com", subject=f"Order {i}", text="Hi",
                        key=f"{queue}-{i}", queue=queue, settings=SETTINGS).id
                for i in range(n)]


def statuses(engine: Engine) -> dict[int, tuple[str, str | None, int]]:
    with engine.connect() as conn:
        return {r.id: (r.status, r.reason, r.attempts) for r in conn.execute(
            select(messages.c.id, messages.c.status, messages.c.reason, messages.c.attempts))}


def charged_per_message(engine: Engine) -> tuple[dict[int, int], int]:
    """(charged attempt rows per message, uncharged outage attempt rows in all)."""
    with engine.connect() as conn:
        charged = dict(conn.execute(
            select(attempts.c.outbox_id, func.count()).where(attempts.c.charged)
            .group_by(attempts.c.outbox_id)).all())
        outage = conn.execute(
            select(func.count()).select_from(attempts)
            .where(attempts.c.outcome == "outage", attempts.c.charged.is_(False))).scalar_one()
    return charged, outage


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("fault", ["nothing_listens", "greeting_421"])
@pytest.mark.slow
def test_a_worker_process_rides_out_an_outage_and_sends_everything_after_it(
    engine: Engine, db_url: str, tmp_path: Path, fault: str
) -> None:
    ids = add(engine, 12)
    server = SmtpTestServer(port=free_port())
    if fault == "greeting_421":
        server.greeting = "421 4.3.2 Try again later"
        server.start()
    log = tmp_path / "worker.log"
    proc = spawn_worker(worker_env(db_url, server, **FAST), log=log)
    try:
        # From the first attempt that met the outage (the process takes a while to start).
        assert wait_for(lambda: charged_per_message(engine)[1] >= 1, 60), log.read_text()
        # The outage lasts past every backoff: more failed sends than two messages'
        # attempt budgets (MAILOUT_MAX_ATTEMPTS=2), each logged uncharged.
        assert wait_for(lambda: charged_per_message(engine)[1] >= OUTAGE_ATTEMPTS, 60), \
            log.read_text()
        during = statuses(engine)
        assert {s for s, _, _ in during.values()} <= {"pending", "sending"}
        shown = _status(db_url)
        assert shown["transport"]["kind"] == "outage"
        assert shown["transport"]["attempts"] >= 1
        assert "transport: OUTAGE since" in _status_text(db_url)
        if fault == "greeting_421":
            server.greeting = None
        else:
            server.start()  # the listener comes up on the port the worker knows
        assert wait_for(lambda: len(server.messages) >= len(ids), 60), log.read_text()
        assert wait_for(lambda: {s for s, _, _ in statuses(engine).values()} == {"sent"}, 60)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        server.stop()
    charged, outage_attempts = charged_per_message(engine)
    assert all(attempts_ <= 1 for _, _, attempts_ in statuses(engine).values())
    assert max(charged.values()) == 1  # the send that worked, nothing else
    assert outage_attempts >= 1  # it did meet the outage, and logged it uncharged
    assert len({m.message_id for m in server.messages}) == len(ids)
    assert _status(db_url)["transport"] is None  # the sends after it say it is over
    text = log.read_text()
    assert "transport outage started" in text
    assert "transport outage ended" in text
    assert "is dead" not in text


def test_an_outage_longer_than_a_queues_max_age_kills_by_age_and_alerts(
    engine: Engine, db_url: str
) -> None:
    short = add(engine, 3, queue="short")  # max age 1.5 s (SETTINGS)
    server = SmtpTestServer(port=free_port())  # never started: nothing listens
    settings = settings_for(db_url, server, MAILOUT_OUTAGE_ALERT_SECONDS=1, **FAST)
    alerts: list[Alert] = []
    worker = build_worker(settings, alert_callback=alerts.append)

    async def scenario() -> None:
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            done = await asyncio.to_thread(statuses, engine)
            if all(done[i][0] == "dead" for i in short) and any(
                    a.kind == "outage" for a in alerts):
                break
        worker.stop()
        await task

    try:
        asyncio.run(scenario())
    finally:
        worker.alerts.close()
        worker.engine.dispose()
    done = statuses(engine)
    assert {done[i][:2] for i in short} == {("dead", "max_age")}
    assert all(done[i][2] == 0 for i in short)  # never charged: none reached the server
    dead_alerts = [a for a in alerts if a.kind == "dead"]
    assert sorted(a.details["id"] for a in dead_alerts) == sorted(short)
    assert all(a.details["reason"] == "max_age" for a in dead_alerts)
    (outage,) = [a for a in alerts if a.kind == "outage"]
    assert outage.details["reason"] == "connect_refused"


def test_one_bad_credentials_event_with_10_sends_in_flight_is_one_pause_and_one_auth(
    engine: Engine, db_url: str, auth_smtp_server: SmtpTestServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    add(engine, 10)
    settings = settings_for(db_url, auth_smtp_server, SMTP_USER="mailer",
                            SMTP_PASS="wrong-password", MAILOUT_PAUSE_SECONDS=30,
                            MAILOUT_CONCURRENCY=10)
    worker = build_worker(settings)

    async def scenario() -> None:
        task = asyncio.create_task(worker.run())
        # Every send in flight has come back (its row pending again, its outcome
        # recorded after the breaker saw it): no further pause can come from them.
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, await asyncio.to_thread(statuses, engine)
            await asyncio.sleep(0.1)
            counts = await asyncio.to_thread(statuses, engine)
            if all(s == "pending" for s, _, _ in counts.values()) and worker.breakers.paused:
                break
        worker.stop()
        await task

    with caplog.at_level(logging.ERROR, logger="mailout.worker.runtime"):
        try:
            asyncio.run(scenario())
        finally:
            worker.alerts.close()
            worker.engine.dispose()
    pauses = [r.getMessage() for r in caplog.records if "transport paused" in r.getMessage()]
    assert len(pauses) == 1, pauses
    assert pauses[0].startswith("transport paused for 30s: bad_credentials")
    assert "Check SMTP_USER and SMTP_PASS" in pauses[0]  # mailout check's diagnosis
    assert "wrong-password" not in caplog.text
    assert auth_smtp_server.auth_failures == 1  # the other 9 did not try AUTH
    assert all(a == 0 for _, _, a in statuses(engine).values())


def _status(db_url: str) -> dict[str, Any]:
    exe = Path(sys.executable).parent / "mailout"
    done = subprocess.run([str(exe), "--db", db_url, "status", "--json"], capture_output=True,
                          text=True, timeout=30, check=True)
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _status_text(db_url: str) -> str:
    exe = Path(sys.executable).parent / "mailout"
    return subprocess.run([str(exe), "--db", db_url, "status"], capture_output=True,
                          text=True, timeout=30, check=True).stdout


def _until_idle(db_url: str, server: SmtpTestServer, **extra: object) -> tuple[int, str, float]:
    env = {**os.environ, **worker_env(db_url, server, **extra)}
    exe = Path(sys.executable).parent / "mailout"
    started = time.monotonic()
    done = subprocess.run([str(exe), "worker", "--until-idle"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    return done.returncode, done.stderr, time.monotonic() - started


@pytest.mark.parametrize("fault", ["outage", "bad_credentials"])
def test_until_idle_exits_3_with_a_one_line_reason_when_the_transport_is_down(
    engine: Engine, db_url: str, auth_smtp_server: SmtpTestServer, fault: str
) -> None:
    add(engine, 5)
    if fault == "outage":
        rc, err, seconds = _until_idle(db_url, SmtpTestServer(port=free_port()))
        expected = "in an outage: connect_refused"
    else:
        rc, err, seconds = _until_idle(db_url, auth_smtp_server, SMTP_USER="mailer",
                                       SMTP_PASS="wrong-password")
        expected = "paused: bad_credentials"
    assert rc == EXIT_TRANSPORT_DOWN, err
    reason = [line for line in err.splitlines() if line.startswith("mailout: stopped")]
    assert len(reason) == 1, err
    assert expected in reason[0]
    # It ends instead of waiting out the 30 s pause or probing on (a bound, not a speed
    # figure: it leaves room for a slow start on a loaded machine).
    assert seconds < 28
    assert {s for s, _, _ in statuses(engine).values()} == {"pending"}


def test_plain_smtp_to_the_implicit_tls_port_pauses_with_the_check_diagnosis(
    test_certs: TestCerts,
) -> None:
    """Port 465 speaks TLS first; a STARTTLS client waits for a greeting that never
    comes. That is a setting, not an outage: pause, and say which setting."""
    try:
        server = SmtpTestServer(port=IMPLICIT_TLS_PORT, tls_context=test_certs.server_context,
                                implicit_tls=True, ca_file=test_certs.ca_file).start()
    except OSError:
        pytest.skip("port 465 is taken on this machine")
    try:
        transport = SmtpTransport(smtp_settings_for(server, tls=TlsMode.STARTTLS, timeout=1.0))
        envelope = raw_envelope("shop@example.com", "buyer@example.com",
                                b"Subject: x\r\n\r\nhi\r\n", "<m1@test>")
        result = asyncio.run(transport.send(envelope))
    finally:
        server.stop()
    assert (result.decision, result.reason, result.stage) == (
        Decision.PAUSE, "tls_mode_mismatch", "connect")
    assert result.detail is not None
    assert "SMTP_TLS=implicit" in result.detail
