"""Send-time guards against real databases and a real SMTP server."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import run_until_idle, settings_for, spawn_worker, worker_env
from sqlalchemy import Engine, insert, select, update

from mailout.db import pauses
from mailout.db.schema import attempts, messages
from mailout.outbox import EnqueueSettings, enqueue
from tests.support import app_checks
from tests.support.app_checks import app, campaigns, users

CHECKS = "tests.support.app_checks:checks"
# How long a worker process may take to start and do its work: reached only when
# something is wrong, so generous (a loaded machine starts Python slowly).
PROCESS_DEADLINE = 120
RESOLVERS = "tests.support.app_checks:resolvers"


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    root = tmp_path / "templates"
    for name in ("campaign_approved", "account_alert", "flaky", "receipt"):
        (root / name).mkdir(parents=True)
        (root / name / "subject.txt").write_text(f"{name}")
        (root / name / "text.txt").write_text("Hello {{ name | default('you') }}")
    (root / "receipt" / "meta.toml").write_text("schema = 2\n")
    return root


def row(engine: Engine, rid: int) -> dict[str, object]:
    with engine.connect() as conn:
        return dict(conn.execute(select(messages).where(messages.c.id == rid)).one()._mapping)


def used_recipient(engine: Engine, rid: int) -> str | None:
    with engine.connect() as conn:
        return conn.execute(select(attempts.c.recipient).where(attempts.c.outbox_id == rid)
                            .order_by(attempts.c.id.desc())).scalar()


def test_a_stale_event_is_cancelled_and_never_sent(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, templates: Path
) -> None:
    app.create_all(engine)
    cfg = EnqueueSettings(templates_dir=templates, message_id_domain="x.example.com")
    with engine.begin() as conn:
        conn.execute(insert(campaigns).values(id="c1", status="approved", version=1))
        conn.execute(insert(campaigns).values(id="c2", status="approved", version=1))
        keep = enqueue(conn, to="a@example.com", template="campaign_approved", event="c1",
                       version=1, settings=cfg).id
        stale = enqueue(conn, to="b@example.com", template="campaign_approved", event="c2",
                        version=1, settings=cfg).id
        # paused a moment after approval: the e-mail would now tell a lie
        conn.execute(update(campaigns).where(campaigns.c.id == "c2")
                     .values(status="paused", version=2))
    run_until_idle(settings_for(db_url, smtp_server, MAILOUT_TEMPLATES=templates,
                                MAILOUT_CHECKS=CHECKS))
    assert row(engine, keep)["status"] == "sent"
    cancelled = row(engine, stale)
    assert (cancelled["status"], cancelled["reason"]) == ("cancelled", "stale")
    assert [m.rcpt_tos for m in smtp_server.messages] == [("a@example.com",)]


def test_a_check_that_raises_is_a_transient_failure_never_a_send(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, templates: Path
) -> None:
    cfg = EnqueueSettings(templates_dir=templates, message_id_domain="x.example.com")
    with engine.begin() as conn:
        rid = enqueue(conn, to="a@example.com", template="flaky", settings=cfg).id
    run_until_idle(settings_for(db_url, smtp_server, MAILOUT_TEMPLATES=templates,
                                MAILOUT_CHECKS=CHECKS))
    after = row(engine, rid)
    assert (after["status"], after["attempts"], after["reason"]) == ("pending", 1,
                                                                      "check_failed")
    assert smtp_server.messages == []


def test_a_resolver_changes_the_address_used(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, templates: Path
) -> None:
    app.create_all(engine)
    cfg = EnqueueSettings(templates_dir=templates, message_id_domain="x.example.com")
    with engine.begin() as conn:
        conn.execute(insert(users).values(id="u1", email="old@example.com"))
        moved = enqueue(conn, to="old@example.com", template="account_alert",
                        params={"user_id": "u1"}, settings=cfg).id
        gone = enqueue(conn, to="ghost@example.com", template="account_alert",
                       params={"user_id": "nobody"}, settings=cfg).id
        conn.execute(update(users).values(email="new@example.com"))  # verified later
    run_until_idle(settings_for(db_url, smtp_server, MAILOUT_TEMPLATES=templates,
                                MAILOUT_RESOLVERS=RESOLVERS))
    assert [m.rcpt_tos for m in smtp_server.messages] == [("new@example.com",)]
    assert used_recipient(engine, moved) == "new@example.com"
    assert row(engine, moved)["recipient"] == "old@example.com"  # the snapshot is kept
    assert (row(engine, gone)["status"], row(engine, gone)["reason"]) == ("cancelled",
                                                                          "no_recipient")


def test_redirect_and_allow_list(engine: Engine, db_url: str,
                                 smtp_server: SmtpTestServer) -> None:
    with engine.begin() as conn:
        ok = enqueue(conn, to="buyer@example.com", subject="Hi", text="x",
                     settings=EnqueueSettings(message_id_domain="x.example.com")).id
        blocked = enqueue(conn, to="someone@customer.example", subject="Hi", text="x",
                          settings=EnqueueSettings(message_id_domain="x.example.com")).id
    run_until_idle(settings_for(db_url, smtp_server, MAILOUT_REDIRECT_TO="qa@example.com",
                                MAILOUT_ALLOW_DOMAINS="example.com"))
    (got,) = smtp_server.messages
    assert got.rcpt_tos == ("qa@example.com",)
    assert b"X-Original-To: buyer@example.com" in got.data
    assert row(engine, ok)["redirected_to"] == "qa@example.com"
    assert used_recipient(engine, ok) == "qa@example.com"
    assert (row(engine, blocked)["status"], row(engine, blocked)["reason"]) == (
        "cancelled", "not_allowed")


def test_an_unknown_schema_version_stays_pending(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, templates: Path, tmp_path: Path
) -> None:
    cfg = EnqueueSettings(templates_dir=templates, message_id_domain="x.example.com")
    with engine.begin() as conn:
        rid = enqueue(conn, to="a@example.com", template="receipt", settings=cfg).id
    assert row(engine, rid)["schema_version"] == 2
    old = tmp_path / "old-templates"  # the worker still runs the previous release
    (old / "receipt").mkdir(parents=True)
    (old / "receipt" / "subject.txt").write_text("Receipt")
    (old / "receipt" / "text.txt").write_text("Thanks")
    alerts: list[object] = []
    run_until_idle(settings_for(db_url, smtp_server, MAILOUT_TEMPLATES=old), alerts=alerts)
    held = row(engine, rid)
    assert (held["status"], held["attempts"]) == ("pending", 0)
    assert smtp_server.messages == []
    assert [a.kind for a in alerts] == ["held"]  # type: ignore[attr-defined]
    with engine.begin() as conn:  # the new release arrives
        conn.execute(update(messages).values(next_attempt_at=messages.c.created_at))
    run_until_idle(settings_for(db_url, smtp_server, MAILOUT_TEMPLATES=templates))
    assert row(engine, rid)["status"] == "sent"


@pytest.mark.slow
def test_pause_and_resume_apply_to_every_worker_process(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, tmp_path: Path
) -> None:
    with engine.begin() as conn:
        pauses.set_pause(conn, "queue", "bulk", "provider asked us to slow down")
        for i in range(10):
            enqueue(conn, to=f"u{i}@example.com", subject="News", text="x", queue="bulk",
                    settings=EnqueueSettings(message_id_domain="x.example.com"))
        enqueue(conn, to="code@example.com", subject="Code", text="1234", queue="critical",
                settings=EnqueueSettings(message_id_domain="x.example.com"))
    env = worker_env(db_url, smtp_server, MAILOUT_POLL_SECONDS=0.2)
    # While paused: two processes each run until nothing is due for them, and a
    # paused queue's rows are not due: both leave, having sent the code only.
    idle = [spawn_worker(env, "--until-idle", log=tmp_path / f"idle{i}.log") for i in range(2)]
    for i, p in enumerate(idle):
        assert p.wait(PROCESS_DEADLINE) == 0, (tmp_path / f"idle{i}.log").read_text()[-2000:]
    assert [m.rcpt_tos for m in smtp_server.messages] == [("code@example.com",)]
    with engine.connect() as conn:
        waiting = conn.execute(select(messages.c.status).where(messages.c.queue == "bulk"))
        assert set(waiting.scalars()) == {"pending"}  # paused: neither failed nor dropped
    # Resumed while two workers run: both were started, and claiming, before it.
    logs = [tmp_path / f"w{i}.log" for i in range(2)]
    procs = [spawn_worker(env, log=log) for log in logs]
    try:
        deadline = time.monotonic() + PROCESS_DEADLINE
        while not all("started" in log.read_text() for log in logs):
            assert time.monotonic() < deadline, [log.read_text()[-2000:] for log in logs]
            time.sleep(0.05)
        with engine.begin() as conn:
            assert pauses.clear_pause(conn, "queue", "bulk")
        smtp_server.wait_for_messages(11, timeout=PROCESS_DEADLINE)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
    assert len(smtp_server.messages) == 11


def test_shutdown_releases_rows_that_never_reached_the_transport(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, templates: Path
) -> None:
    import asyncio

    from mailout.worker.build import build_worker

    (templates / "slow").mkdir()
    (templates / "slow" / "subject.txt").write_text("Slow")
    (templates / "slow" / "text.txt").write_text("Hello")
    cfg = EnqueueSettings(templates_dir=templates, message_id_domain="x.example.com")
    with engine.begin() as conn:
        rid = enqueue(conn, to="a@example.com", template="slow", settings=cfg).id
    settings = settings_for(db_url, smtp_server, MAILOUT_TEMPLATES=templates,
                            MAILOUT_CHECKS="tests.support.app_checks:slow_checks",
                            MAILOUT_SHUTDOWN_GRACE_SECONDS=0.1)
    worker = build_worker(settings)
    app_checks.slow_check_started.clear()
    app_checks.slow_check_may_finish.clear()

    async def scenario() -> None:
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + PROCESS_DEADLINE
        while not app_checks.slow_check_started.is_set():  # claimed, its check running
            assert time.monotonic() < deadline
            assert not task.done()
            await asyncio.sleep(0.01)
        worker.stop()
        await task  # the grace runs out while the check is still deciding
        app_checks.slow_check_may_finish.set()

    try:
        asyncio.run(scenario())
    finally:
        worker.alerts.close()
        worker.engine.dispose()
    released = row(engine, rid)
    assert (released["status"], released["attempts"]) == ("pending", 0)
    assert released["lease_token"] is None
    assert smtp_server.messages == []


def test_an_address_found_by_a_resolver_is_checked_against_the_suppression_list(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, templates: Path
) -> None:
    from mailout.db.suppressions import suppress

    app.create_all(engine)
    cfg = EnqueueSettings(templates_dir=templates, message_id_domain="x.example.com")
    with engine.begin() as conn:
        conn.execute(insert(users).values(id="u-suppressed", email="New@Example.com"))
        suppress(conn, "new@example.com", "complaint", actor="test")
        rid = enqueue(conn, to="old@example.com", template="account_alert",
                      params={"user_id": "u-suppressed"}, settings=cfg).id
    run_until_idle(settings_for(db_url, smtp_server, MAILOUT_TEMPLATES=templates,
                                MAILOUT_RESOLVERS=RESOLVERS))
    assert (row(engine, rid)["status"], row(engine, rid)["reason"]) == ("cancelled",
                                                                        "suppressed")
    assert smtp_server.messages == []
