"""The worker against a real SMTP server and real databases."""

from __future__ import annotations

import asyncio
import signal
import time
from datetime import UTC, datetime
from email import message_from_bytes
from pathlib import Path

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import run_until_idle, settings_for, spawn_worker, worker_env
from sqlalchemy import Engine, func, select, update

from mailout import db
from mailout.db.schema import attempts, messages
from mailout.delivery.policy import backoff_bounds
from mailout.outbox import EnqueueSettings, enqueue
from mailout.support.alerts import Alert
from mailout.worker.build import build_worker
from tests.support.timetravel import make_due

SETTINGS = EnqueueSettings(message_id_domain="test.example.com")


def add(engine: Engine, recipients: list[str], **kw: object) -> list[int]:
    with engine.begin() as conn:
        return [
            enqueue(conn, to=to, subject=f"Order {i}", text=f"Hello {i}", key=f"order-{i}",
                    settings=SETTINGS, **kw).id  # type: ignore[arg-type]
            for i, to in enumerate(recipients)
        ]


def rows(engine: Engine) -> dict[int, dict[str, object]]:
    with engine.connect() as conn:
        return {r.id: dict(r._mapping) for r in conn.execute(select(messages))}


def attempt_log(engine: Engine, rid: int) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            select(attempts.c.attempt, attempts.c.outcome, attempts.c.reply_code)
            .where(attempts.c.outbox_id == rid).order_by(attempts.c.id))]


def test_messages_arrive_once_with_their_message_id_and_provider_id(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer
) -> None:
    ids = add(engine, [f"user{i}@example.com" for i in range(25)])
    worker = run_until_idle(settings_for(db_url, smtp_server))
    assert worker.sent == 25
    got = smtp_server.messages
    assert len(got) == 25
    stored = rows(engine)
    by_mid = {m.message_id: m for m in got}
    assert set(by_mid) == {r["message_id"] for r in stored.values()}
    for rid in ids:
        row = stored[rid]
        received = by_mid[row["message_id"]]
        assert received.idempotency_key == row["idempotency_key"]
        assert received.rcpt_tos == (row["recipient"],)
        assert row["status"] == "sent"
        assert row["attempts"] == 1
        assert row["provider_message_id"]  # parsed from "250 ... queued as ID"
        assert row["provider_message_id"] in str(row["last_reply_text"])
        assert row["sent_at"]
        assert row["first_attempt_at"]
        assert row["finished_at"]
        assert attempt_log(engine, rid) == [(1, "sent", 250)]
    parsed = message_from_bytes(got[0].data)
    assert parsed["From"] == "Shop <shop@example.com>"


def test_a_4yz_reply_reschedules_within_the_backoff_bounds(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer
) -> None:
    (rid,) = add(engine, ["rcpt-451@example.com"])
    settings = settings_for(db_url, smtp_server, MAILOUT_RETRY_BASE_SECONDS=60,
                            MAILOUT_RETRY_CAP_SECONDS=600)
    run_until_idle(settings)
    row = rows(engine)[rid]
    assert row["status"] == "pending"
    assert row["attempts"] == 1
    assert row["last_reply_code"] == 451
    low, high = backoff_bounds(settings.retry_policy, 1)
    delay = (row["next_attempt_at"] - row["last_attempt_at"]).total_seconds()  # type: ignore[operator]
    assert low - 1 <= delay <= high + 1
    assert delay > 0
    assert attempt_log(engine, rid) == [(1, "retry", 451)]
    assert smtp_server.messages == []


def test_a_transient_failure_is_retried_and_then_sent(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer
) -> None:
    (rid,) = add(engine, ["rcpt-451-once@example.com"])
    settings = settings_for(db_url, smtp_server, MAILOUT_RETRY_BASE_SECONDS=0.05,
                            MAILOUT_RETRY_CAP_SECONDS=0.1)
    run_until_idle(settings)
    make_due(engine, [rid])  # the retry's backoff has passed
    run_until_idle(settings)
    assert rows(engine)[rid]["status"] == "sent"
    assert attempt_log(engine, rid) == [(1, "retry", 451), (2, "sent", 250)]
    assert len(smtp_server.messages) == 1


def test_a_5yz_reply_fails_permanently_with_the_reply_text(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer
) -> None:
    bad, good = add(engine, ["rcpt-550@example.com", "fine@example.com"])
    run_until_idle(settings_for(db_url, smtp_server))
    stored = rows(engine)
    assert stored[bad]["status"] == "failed"
    assert stored[bad]["last_reply_code"] == 550
    assert "5.1.1" in str(stored[bad]["last_reply_text"])
    assert stored[bad]["finished_at"] is not None
    assert stored[good]["status"] == "sent"


def test_a_lost_reply_after_the_dot_is_unknown_and_resent_with_the_same_ids(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer
) -> None:
    (rid,) = add(engine, ["drop-after-dot-once@example.com"])
    settings = settings_for(db_url, smtp_server, MAILOUT_RETRY_BASE_SECONDS=0.05,
                            MAILOUT_RETRY_CAP_SECONDS=0.1)
    run_until_idle(settings)
    make_due(engine, [rid])  # the retry's backoff has passed
    run_until_idle(settings)
    assert [a[1] for a in attempt_log(engine, rid)] == ["unknown", "sent"]
    first, second = smtp_server.messages
    assert first.message_id == second.message_id == rows(engine)[rid]["message_id"]
    assert first.idempotency_key == second.idempotency_key == "order-0"


def test_a_render_error_fails_that_message_only(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, tmp_path: Path
) -> None:
    (tmp_path / "welcome").mkdir()
    (tmp_path / "welcome" / "subject.txt").write_text("Hi {{ name }}")
    (tmp_path / "welcome" / "text.txt").write_text("Hello {{ name }}")
    with engine.begin() as conn:
        ok = enqueue(conn, to="a@example.com", template="welcome", params={"name": "Ana"},
                     settings=SETTINGS).id
        broken = enqueue(conn, to="b@example.com", template="welcome", params={},
                         settings=SETTINGS).id
    run_until_idle(settings_for(db_url, smtp_server, MAILOUT_TEMPLATES=tmp_path))
    stored = rows(engine)
    assert stored[ok]["status"] == "sent"
    assert stored[broken]["status"] == "failed"
    assert stored[broken]["reason"] == "render_error"
    assert len(smtp_server.messages) == 1


def test_max_attempts_and_age_limit_lead_to_dead_with_an_alert(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer
) -> None:
    tired, old = add(engine, ["rcpt-451@example.com", "fine@example.com"])
    with engine.begin() as conn:  # make the second one already too old
        conn.execute(update(messages).where(messages.c.id == old)
                     .values(expires_at=datetime(2020, 1, 1, tzinfo=UTC)))
    alerts: list[Alert] = []
    settings = settings_for(db_url, smtp_server, MAILOUT_MAX_ATTEMPTS=1)
    run_until_idle(settings, alerts=alerts)
    stored = rows(engine)
    assert (stored[tired]["status"], stored[tired]["reason"]) == ("dead", "max_attempts")
    assert (stored[old]["status"], stored[old]["reason"]) == ("dead", "max_age")
    dead = sorted(a.details["id"] for a in alerts if a.kind == "dead")
    assert dead == sorted([tired, old])
    assert smtp_server.messages == []  # the expired one was never sent


def test_bad_credentials_pause_sending_without_failing_anything(
    engine: Engine, db_url: str, auth_smtp_server: SmtpTestServer
) -> None:
    add(engine, [f"user{i}@example.com" for i in range(20)])
    settings = settings_for(db_url, auth_smtp_server, SMTP_USER="mailer",
                            SMTP_PASS="wrong-password", MAILOUT_PAUSE_SECONDS=0.3,
                            MAILOUT_PAUSE_CAP_SECONDS=0.6, MAILOUT_CONCURRENCY=4)
    alerts: list[Alert] = []
    worker = build_worker(settings, alert_callback=alerts.append)

    async def scenario() -> None:
        task = asyncio.create_task(worker.run())
        # Wait for the pause itself, not a fixed time: on a loaded machine the first
        # AUTH can take longer than any fixed sleep.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not worker.breakers.paused:
            await asyncio.sleep(0.05)
        # A few pause periods, each ending in a failed probe, and the sends in flight
        # when it opened all back (a loaded machine takes a while): nothing charged.
        while True:
            stored = await asyncio.to_thread(rows, engine)
            sending = [r for r in stored.values() if r["status"] == "sending"]
            if worker.breakers.pause.failed_probes >= 2 and len(sending) <= 1:
                break
            assert time.monotonic() < deadline, (worker.breakers.pause.failed_probes, sending)
            await asyncio.sleep(0.05)
        # The breaker's probe may be in flight (one row claimed, its attempt given back
        # when the pause is confirmed); every other row waits, not charged.
        probing = [r for r in stored.values() if r["status"] == "sending"]
        assert len(probing) <= 1, probing
        waiting = [r for r in stored.values() if r["status"] != "sending"]
        assert {r["status"] for r in waiting} == {"pending"}
        assert all(r["attempts"] == 0 for r in waiting)  # not charged
        assert worker.breakers.paused
        # The operator fixes the credentials (here: the server accepts them now).
        auth_smtp_server.auth = ("mailer", "wrong-password")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(auth_smtp_server.messages) < 20:
            await asyncio.sleep(0.1)
        worker.stop()
        await task

    try:
        asyncio.run(scenario())
    finally:
        worker.alerts.close()
        worker.engine.dispose()
    assert len(auth_smtp_server.messages) == 20
    assert all(r["status"] == "sent" for r in rows(engine).values())
    kinds = [a.kind for a in alerts]
    assert kinds.count("paused") == 1
    assert kinds[-1] == "resumed"
    with engine.connect() as conn:
        paused = conn.execute(select(func.count()).select_from(attempts)
                              .where(attempts.c.outcome == "paused")).scalar_one()
        failed = conn.execute(select(func.count()).select_from(messages)
                              .where(messages.c.status == "failed")).scalar_one()
    assert paused >= 1
    assert failed == 0


@pytest.mark.slow
def test_four_worker_processes_deliver_every_message_exactly_once(
    server_url: str, smtp_server: SmtpTestServer, tmp_path: Path
) -> None:
    engine = db.make_engine(server_url)
    n = 2000
    with engine.begin() as conn:
        for i in range(n):
            enqueue(conn, to=f"user{i}@example.com", subject="Hi", text="x", key=f"k{i}",
                    settings=SETTINGS)
    env = worker_env(server_url, smtp_server, MAILOUT_CONCURRENCY=8)
    procs = [spawn_worker(env, "--until-idle", log=tmp_path / f"w{i}.log") for i in range(4)]
    for p in procs:
        assert p.wait(timeout=120) == 0, (tmp_path / "w0.log").read_text()[-2000:]
    received = [m.message_id for m in smtp_server.messages]
    assert len(received) == n
    assert len(set(received)) == n
    with engine.connect() as conn:
        statuses = conn.execute(select(messages.c.status, func.count())
                                .group_by(messages.c.status)).all()
        owners = conn.execute(select(func.count(func.distinct(attempts.c.worker)))).scalar_one()
    assert dict(statuses) == {"sent": n}
    assert owners >= 2  # the work really was shared
    engine.dispose()


@pytest.mark.slow
def test_sigterm_drains_gracefully_and_loses_nothing(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, tmp_path: Path
) -> None:
    n = 40
    add(engine, [f"slow-after-dot+{i}@example.com" for i in range(n)])
    smtp_server.slow_delay = 0.3
    env = worker_env(db_url, smtp_server, MAILOUT_CONCURRENCY=4)
    proc = spawn_worker(env, log=tmp_path / "w.log")
    # The SIGTERM must land mid-drain: after some sends (a loaded machine may take long to
    # start the worker) and, at 0.3 s a message on 4 connections, long before the last.
    deadline = time.monotonic() + 120
    while len(smtp_server.messages) < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(smtp_server.messages) >= 8, (tmp_path / "w.log").read_text()[-2000:]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, (tmp_path / "w.log").read_text()[-2000:]
    stored = rows(engine)
    statuses = [r["status"] for r in stored.values()]
    assert "sending" not in statuses  # every in-flight send was finished and recorded
    assert statuses.count("sent") == len(smtp_server.messages) < n
    smtp_server.slow_delay = 0
    run_until_idle(settings_for(db_url, smtp_server))
    assert {r["status"] for r in rows(engine).values()} == {"sent"}
    received = [m.message_id for m in smtp_server.messages]
    assert len(received) == len(set(received)) == n
