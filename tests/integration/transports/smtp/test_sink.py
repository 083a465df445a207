"""Draining into Postfix's smtp-sink, the fast real SMTP server the benchmarks use.

Skipped where smtp-sink is not installed (CI installs postfix for it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from bench.common import smtp_sink
from bench.support.workers import spawn_worker
from sqlalchemy import Engine, func, select

from mailout.db.schema import attempts, messages
from mailout.outbox import EnqueueSettings, Message, enqueue_many

pytestmark = pytest.mark.skipif(
    shutil.which("smtp-sink") is None and not Path("/usr/sbin/smtp-sink").exists(),
    reason="smtp-sink (Debian package postfix) is not installed",
)


@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_a_worker_drains_into_smtp_sink(engine: Engine, db_url: str, tmp_path: Path,
                                        event_loop: str) -> None:
    n = 300
    batch = [Message(to=f"user{i}@example.com", subject=f"Order {i}", text="Thanks " * 50,
                     html="<p>Thanks</p>" * 20, key=f"sink-{i}") for i in range(n)]
    with engine.begin() as conn:
        enqueue_many(conn, batch, settings=EnqueueSettings(message_id_domain="x.example.com"))
    with smtp_sink() as port:
        env = {"MAILOUT_DATABASE_URL": db_url, "MAIL_FROM": "shop@example.com",
               "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(port), "SMTP_TLS": "none",
               "MAILOUT_CONCURRENCY": "8", "MAILOUT_EVENT_LOOP": event_loop}
        worker = spawn_worker(env, "--until-idle", log=tmp_path / "worker.log")
        assert worker.wait(120) == 0, (tmp_path / "worker.log").read_text()[-2000:]
    assert f"event loop {event_loop}" in (tmp_path / "worker.log").read_text()
    with engine.connect() as conn:
        statuses = dict(conn.execute(select(messages.c.status, func.count())
                                     .group_by(messages.c.status)).all())
        codes = set(conn.execute(select(attempts.c.reply_code)).scalars())
    assert statuses == {"sent": n}
    assert codes == {250}
