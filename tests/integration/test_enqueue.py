"""Transactional enqueue against real SQLite files and a real PostgreSQL."""

from __future__ import annotations

import re
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session

from mailout import db
from mailout.db.schema import messages
from mailout.exceptions import IdempotencyConflict, InvalidMessage
from mailout.outbox import EnqueueSettings, Message, enqueue, enqueue_many
from tests.support.locks import wait_for_lock_waiter

SETTINGS = EnqueueSettings(message_id_domain="shop.example.com")


def count(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(messages)).scalar_one()


def row(engine: Engine, rid: int) -> dict[str, object]:
    with engine.connect() as conn:
        return dict(conn.execute(select(messages).where(messages.c.id == rid)).one()._mapping)


def test_enqueue_writes_a_pending_row_with_a_fresh_message_id(engine: Engine) -> None:
    with engine.begin() as conn:
        res = enqueue(conn, to="Buyer@Example.com", template="order_confirmation",
                      params={"order": 1234, "items": ["a", "b"]},
                      key="order-1234-confirmation", queue="critical", priority=5,
                      headers={"X-Order": "1234"}, settings=SETTINGS)
    assert res.created
    assert res.key == "order-1234-confirmation"
    assert re.fullmatch(r"<[0-9a-f]{32}@shop\.example\.com>", res.message_id)
    stored = row(engine, res.id)
    assert stored["status"] == "pending"
    assert stored["recipient"] == "Buyer@example.com"  # domain normalised, local part kept
    assert stored["params"] == {"order": 1234, "items": ["a", "b"]}
    assert stored["headers"] == {"X-Order": "1234"}
    assert stored["message_id"] == res.message_id
    assert stored["attempts"] == 0
    assert stored["queue"] == "critical"
    assert stored["priority"] == 5
    assert stored["next_attempt_at"] is not None
    assert stored["created_at"] is not None
    assert stored["expires_at"] > stored["created_at"]


def test_rollback_leaves_nothing(engine: Engine) -> None:
    def business_transaction() -> None:
        with engine.begin() as conn:
            conn.execute(text("SELECT 1"))
            enqueue(conn, to="a@example.com", subject="Hi", text="body", key="k-rollback",
                    settings=SETTINGS)
            raise RuntimeError("the business transaction failed")

    with pytest.raises(RuntimeError):
        business_transaction()
    assert count(engine) == 0


def test_duplicate_key_returns_the_existing_row(engine: Engine) -> None:
    with engine.begin() as conn:
        first = enqueue(conn, to="a@example.com", subject="Hi", text="x", key="dup",
                        settings=SETTINGS)
    with engine.begin() as conn:
        again = enqueue(conn, to="a@example.com", subject="Hi", text="x", key="dup",
                        settings=SETTINGS)
    assert not again.created
    assert (again.id, again.message_id) == (first.id, first.message_id)
    assert count(engine) == 1


def test_duplicate_key_with_other_content_is_a_conflict(engine: Engine) -> None:
    with engine.begin() as conn:
        first = enqueue(conn, to="a@example.com", subject="Hi", text="x", key="dup",
                        settings=SETTINGS)
    with pytest.raises(IdempotencyConflict) as info, engine.begin() as conn:
        enqueue(conn, to="b@example.com", subject="Hi", text="y", key="dup", settings=SETTINGS)
    assert info.value.existing_id == first.id
    assert set(info.value.differing) == {"recipient", "body_text"}
    with engine.begin() as conn:
        kept = enqueue(conn, to="b@example.com", subject="Hi", text="y", key="dup",
                       settings=SETTINGS, ignore_conflicts=True)
    assert not kept.created
    assert kept.id == first.id
    assert row(engine, first.id)["recipient"] == "a@example.com"


def test_a_session_bound_to_an_engine_enqueues_in_its_transaction(engine: Engine) -> None:
    with Session(engine) as session:
        enqueue(session, to="a@example.com", subject="Hi", text="x", key="s1", settings=SETTINGS)
        session.rollback()
    assert count(engine) == 0
    with Session(engine) as session, session.begin():
        res = enqueue(session, to="a@example.com", subject="Hi", text="x", key="s1",
                      settings=SETTINGS)
    assert res.created
    assert count(engine) == 1


async def test_async_connection_and_session(db_url: str, engine: Engine) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    from mailout.outbox import enqueue_async

    aurl = (db_url.replace("sqlite://", "sqlite+aiosqlite://")
            .replace("mysql+pymysql://", "mysql+aiomysql://"))
    aengine = create_async_engine(aurl)
    try:
        async with aengine.begin() as conn:
            a = await enqueue_async(conn, to="a@example.com", subject="Hi", text="x",
                                    key="async-1", settings=SETTINGS)
        async with AsyncSession(aengine) as session, session.begin():
            b = await enqueue_async(session, to="a@example.com", subject="Hi", text="x",
                                    key="async-2", settings=SETTINGS)
    finally:
        await aengine.dispose()
    assert a.created
    assert b.created
    assert count(engine) == 2


def test_send_at_and_expires_in_are_stored_in_utc(engine: Engine) -> None:
    when = datetime(2031, 5, 1, 12, 0, tzinfo=UTC)
    with engine.begin() as conn:
        res = enqueue(conn, to="a@example.com", subject="Hi", text="x", key="later",
                      send_at=when.astimezone(), expires_in=timedelta(hours=2),
                      settings=SETTINGS)
    stored = row(engine, res.id)
    next_at = stored["next_attempt_at"]
    expires = stored["expires_at"]
    assert isinstance(next_at, datetime)
    assert isinstance(expires, datetime)
    assert next_at.replace(tzinfo=None) == when.replace(tzinfo=None)
    assert (expires - next_at) == timedelta(hours=2)


def test_enqueue_many_writes_all_in_one_call(engine: Engine) -> None:
    batch = [Message(to=f"u{i}@example.com", subject="Hi", text="x", key=f"bulk-{i}")
             for i in range(50)]
    batch.append(Message(to="u0@example.com", subject="Hi", text="x", key="bulk-0"))
    with engine.begin() as conn:
        results = enqueue_many(conn, batch, settings=SETTINGS)
    assert [r.key for r in results] == [m.key for m in batch]
    assert sum(r.created for r in results) == 50
    assert results[-1].id == results[0].id
    assert not results[-1].created
    assert count(engine) == 50


def test_enqueue_many_with_one_bad_message_writes_nothing(engine: Engine) -> None:
    batch = [Message(to="ok@example.com", subject="Hi", text="x", key="fine"),
             Message(to="not-an-address", subject="Hi", text="x", key="bad")]
    with pytest.raises(InvalidMessage) as info, engine.begin() as conn:
        enqueue_many(conn, batch, settings=SETTINGS)
    assert info.value.field == "to"
    assert count(engine) == 0


GOOD = {"to": "a@example.com", "subject": "Hi", "text": "body", "key": "k"}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"to": "not-an-address"}, "to"),
        ({"to": "a@example.com\r\nBcc: victim@example.com"}, "to"),
        ({"subject": "Hi\r\nBcc: victim@example.com"}, "subject"),
        ({"subject": "Hi\nthere"}, "subject"),
        ({"headers": {"X-Tag": "a\r\nBcc: victim@example.com"}}, "headers[X-Tag]"),
        ({"headers": {"X Bad Name": "v"}}, "headers"),
        ({"headers": {"Message-ID": "<forged@example.com>"}}, "headers"),
        ({"sender": "Shop <shop@example.com>\r\nBcc: x@example.com"}, "sender"),
        ({"key": "order-1\r\nX-Injected: 1"}, "key"),
        ({"key": ""}, "key"),
        ({"key": "k" * 256}, "key"),
        ({"key": "  padded"}, "key"),
        ({"subject": None, "text": None}, "template"),
        ({"text": None}, "subject"),
        ({"template": "order"}, "template"),
        ({"queue": "no spaces"}, "queue"),
        ({"priority": 40000}, "priority"),
        ({"text": "nul\x00byte"}, "text"),
        ({"expires_in": -5}, "expires_in"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(
    engine: Engine, changes: dict[str, object], field: str
) -> None:
    kwargs = {**GOOD, **changes}
    with pytest.raises(InvalidMessage) as info, engine.begin() as conn:
        enqueue(conn, settings=SETTINGS, **kwargs)  # type: ignore[arg-type]
    assert info.value.field == field
    assert field.split("[")[0] in str(info.value)
    assert count(engine) == 0


@pytest.mark.parametrize(
    "params",
    [{"when": datetime(2030, 1, 1)}, {"n": float("nan")}, {1: "int key"}, ["not", "a", "dict"],
     {"s": "\ud800"}],
)
def test_params_that_are_not_json_are_refused(engine: Engine, params: object) -> None:
    with pytest.raises(InvalidMessage) as info, engine.begin() as conn:
        enqueue(conn, to="a@example.com", template="t", params=params,  # type: ignore[arg-type]
                settings=SETTINGS)
    assert info.value.field == "params"
    assert count(engine) == 0


def test_unknown_template_is_refused_when_a_folder_is_configured(
    engine: Engine, tmp_path: Path
) -> None:
    (tmp_path / "welcome").mkdir()
    (tmp_path / "welcome" / "subject.txt").write_text("Welcome")
    (tmp_path / "welcome" / "text.txt").write_text("Hello")
    cfg = EnqueueSettings(templates_dir=tmp_path, message_id_domain="x.example.com")
    with engine.begin() as conn:
        assert enqueue(conn, to="a@example.com", template="welcome", settings=cfg).created
    with pytest.raises(InvalidMessage) as info, engine.begin() as conn:
        enqueue(conn, to="a@example.com", template="missing", settings=cfg)
    assert info.value.field == "template"
    for bad in ("../etc", "a/b", ".hidden"):
        with pytest.raises(InvalidMessage), engine.begin() as conn:
            enqueue(conn, to="a@example.com", template=bad, settings=cfg)
    assert count(engine) == 1


def test_a_message_over_the_size_limit_is_refused(engine: Engine) -> None:
    cfg = EnqueueSettings(max_message_bytes=1000, message_id_domain="x.example.com")
    with pytest.raises(InvalidMessage) as info, engine.begin() as conn:
        enqueue(conn, to="a@example.com", subject="Hi", text="é" * 600, settings=cfg)
    assert info.value.field == "size"
    assert count(engine) == 0


def test_message_id_domain_falls_back_to_mail_from() -> None:
    cfg = EnqueueSettings.from_env({"MAIL_FROM": "Shop <noreply@mail.shop.example>"})
    assert cfg.message_id_domain == "mail.shop.example"
    cfg = EnqueueSettings.from_env({"MAIL_FROM": "noreply@a.example",
                                    "MAILOUT_MESSAGE_ID_DOMAIN": "ids.example"})
    assert cfg.message_id_domain == "ids.example"


text_or_none = st.one_of(st.none(), st.text(max_size=40))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    to=st.one_of(st.text(max_size=40), st.emails().map(str)),
    subject=text_or_none, body=text_or_none, key=text_or_none,
    queue=st.text(max_size=20), sender=text_or_none,
    header_name=st.text(max_size=12), header_value=st.text(max_size=20),
)
def test_random_input_gives_a_clean_row_or_invalid_message(
    engine: Engine, to: str, subject: str | None, body: str | None, key: str | None,
    queue: str, sender: str | None, header_name: str, header_value: str,
) -> None:
    conn = engine.connect()
    trans = conn.begin()
    try:
        try:
            res = enqueue(conn, to=to, subject=subject, text=body, key=key, queue=queue,
                          sender=sender, headers={header_name: header_value},
                          settings=SETTINGS)
        except InvalidMessage:
            assert conn.execute(select(func.count()).select_from(messages)).scalar_one() == 0
            return
        stored = conn.execute(select(messages).where(messages.c.id == res.id)).one()._mapping
        assert stored["subject"] == subject
        assert stored["body_text"] == body
        assert stored["queue"] == queue
        assert stored["headers"] == {header_name: header_value}
        for value in (stored["subject"], stored["recipient"], stored["idempotency_key"],
                      header_value, stored["sender"] or ""):
            assert "\r" not in value
            assert "\n" not in value
    finally:
        trans.rollback()
        conn.close()


def test_concurrent_duplicate_keys_give_one_row(server_url: str) -> None:
    """Two real server connections race on one key: exactly one row, no error."""
    engine = db.make_engine(server_url)
    results = {}
    with engine.connect() as first:
        t1 = first.begin()
        results["first"] = enqueue(first, to="a@example.com", subject="Hi", text="x",
                                   key="race", settings=SETTINGS)

        def second() -> None:
            with engine.begin() as conn:
                results["second"] = enqueue(conn, to="a@example.com", subject="Hi", text="x",
                                            key="race", settings=SETTINGS)

        thread = threading.Thread(target=second)
        thread.start()
        # The second insert waits for the first transaction (seen waiting on its lock).
        wait_for_lock_waiter(engine, "%INSERT INTO mailout_messages%")
        assert thread.is_alive()
        t1.commit()
        thread.join(10)
    assert results["first"].created
    assert not results["second"].created
    assert results["second"].id == results["first"].id
    assert count(engine) == 1
    engine.dispose()


def test_concurrent_duplicate_key_after_rollback_creates_the_row(server_url: str) -> None:
    engine = db.make_engine(server_url)
    results = {}
    with engine.connect() as first:
        t1 = first.begin()
        enqueue(first, to="a@example.com", subject="Hi", text="x", key="race2",
                settings=SETTINGS)

        def second() -> None:
            with engine.begin() as conn:
                results["second"] = enqueue(conn, to="a@example.com", subject="Hi", text="x",
                                            key="race2", settings=SETTINGS)

        thread = threading.Thread(target=second)
        thread.start()
        wait_for_lock_waiter(engine, "%INSERT INTO mailout_messages%")
        t1.rollback()
        thread.join(10)
    assert results["second"].created
    assert count(engine) == 1
    engine.dispose()


def test_queue_age_limits_default_per_queue(engine: Engine) -> None:
    cfg = EnqueueSettings.from_env({"MAILOUT_MESSAGE_ID_DOMAIN": "x.example.com",
                                    "MAILOUT_QUEUE_POLICIES": "reports:max_age=2h"})
    ages = {}
    with engine.begin() as conn:
        for queue in ("critical", "bulk", "reports", "default"):
            rid = enqueue(conn, to="a@example.com", subject="Hi", text="x", queue=queue,
                          settings=cfg).id
            stored = conn.execute(select(messages).where(messages.c.id == rid)).one()
            ages[queue] = round((stored.expires_at - stored.created_at).total_seconds())
    assert ages == {"critical": 900, "bulk": 3 * 86400, "reports": 7200, "default": 86400}
