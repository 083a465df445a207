"""Poison messages end after one attempt: refused at enqueue, or failed once.

Inputs that once crashed the renderer (AttributeError, TypeError, IndexError,
RecursionError) escaped the attempt, left the row ``sending`` and were reclaimed at
every lease expiry, without ever going dead. Each now either is refused at enqueue
with InvalidMessage or ends its first attempt ``failed`` with ``render_error``.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import run_until_idle, settings_for
from sqlalchemy import Engine, func, select

from mailout import db
from mailout.db import leasing, outcomes
from mailout.db.schema import attempts, messages
from mailout.delivery import attempt
from mailout.delivery.guards import Guards
from mailout.delivery.policy import RetryPolicy
from mailout.exceptions import InvalidMessage
from mailout.message.render import Renderer
from mailout.models import ClaimedMessage, Outcome, Status
from mailout.outbox import EnqueueSettings, enqueue
from mailout.transports.memory import MemoryTransport

SETTINGS = EnqueueSettings(message_id_domain="test.example.com")
# A template that recurses through a param until Python's recursion limit.
RECURSIVE = "{% macro down(x) %}{{ down(x) }}{% endmacro %}{{ down(order) }}"

POISON: dict[str, dict[str, Any]] = {
    "dot display name": {"sender": '"." <x@shop.example>'},
    "dots display name": {"sender": '"..." <x@shop.example>'},
    "non-ascii reply-to": {"headers": {"Reply-To": " :;:ü"}},
    "recursive template": {"template": "recursive", "params": {"order": 1}},
}


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    folder = tmp_path / "templates" / "recursive"
    folder.mkdir(parents=True)
    (folder / "subject.txt").write_text("Your order")
    (folder / "text.txt").write_text(RECURSIVE)
    return folder.parent


@pytest.mark.parametrize("name", list(POISON))
def test_each_poison_input_is_refused_at_enqueue_or_fails_once(
    engine: Engine, db_url: str, smtp_server: SmtpTestServer, templates: Path, name: str
) -> None:
    fields = dict(POISON[name])
    if "template" not in fields:
        fields.update(subject="Hello", text="Hi")
    try:
        with engine.begin() as conn:
            rid = enqueue(conn, to="buyer@example.com", key=f"poison-{name}",
                          settings=SETTINGS, **fields).id
    except InvalidMessage:
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(messages)).scalar_one() == 0
        return
    settings = settings_for(db_url, smtp_server, MAILOUT_MAX_ATTEMPTS=3,
                            MAILOUT_TEMPLATES=str(templates), MAILOUT_LEASE_SECONDS=5,
                            SMTP_TIMEOUT=2)
    run_until_idle(settings)
    with engine.connect() as conn:
        row = conn.execute(select(messages.c.status, messages.c.reason, messages.c.attempts)
                           .where(messages.c.id == rid)).one()
        log = conn.execute(select(attempts.c.outcome).where(attempts.c.outbox_id == rid)).all()
    assert len(log) == 1  # one attempt, never a lease expiry and a reclaim
    if row.status == "sent":  # the renderer handles it: not poison (any more)
        assert len(smtp_server.messages) == 1
        return
    assert (row.status, row.reason, row.attempts) == ("failed", "render_error", 1)
    assert log[0].outcome == "failed"
    assert smtp_server.messages == []


def _claim_one(engine: Engine) -> ClaimedMessage:
    with engine.begin() as conn:
        enqueue(conn, to="buyer@example.com", template="welcome", params={}, key="g-1",
                settings=SETTINGS)
    with db.immediate(engine) as conn:
        (msg,) = leasing.claim(conn, owner="w", limit=1, lease_seconds=30)
    return msg


def test_a_guard_that_raises_unexpectedly_ends_in_a_charged_retry(engine: Engine) -> None:
    msg = _claim_one(engine)
    # A send-time check whose database is gone: connect() raises outside the check.
    gone = db.make_engine("postgresql+psycopg://nobody@127.0.0.1:9/none")
    transport = MemoryTransport()
    ctx = attempt.Context(
        worker="w", policy=RetryPolicy(base_seconds=10, cap_seconds=100, max_attempts=3),
        renderer=Renderer(None, mail_from="shop@example.com"), transport=transport,
        rng=random.Random(1), guards=Guards(checks={"welcome": lambda m, c: True}),
        engine=gone,
    )
    try:
        done = asyncio.run(attempt.run(msg, ctx, pause_seconds=30))
    finally:
        gone.dispose()
    assert (done.outcome, done.status, done.reason) == (Outcome.RETRY, Status.PENDING,
                                                        "check_failed")
    assert not done.uncharge  # charged: a guard that always crashes ends dead, with an alert
    assert transport.outbox == []  # never sent unchecked
    with engine.begin() as conn:
        assert outcomes.complete(conn, [done]) == []
    with engine.connect() as conn:
        status = conn.execute(select(messages.c.status, messages.c.attempts)).one()
    assert tuple(status) == ("pending", 1)
