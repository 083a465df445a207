"""Enqueue against hostile input, on SQLite and PostgreSQL (issue 14, items 6-8, 10, 17).

What enqueue accepts the worker can render; bad input is an InvalidMessage naming
the field and writes nothing; a batch is all or nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from bench.support.pg import create_database, drop_database
from sqlalchemy import Engine, func, select

from mailout import db
from mailout.db.schema import messages
from mailout.delivery.policy import MAX_AGE_SECONDS
from mailout.exceptions import (
    ConfigError,
    IdempotencyConflict,
    InvalidMessage,
    RenderError,
    SchemaMissing,
)
from mailout.message.render import Renderer
from mailout.outbox import EnqueueSettings, Message, enqueue, enqueue_many
from tests.support import mysql
from tests.unit.message.test_render import NOW, claimed

SETTINGS = EnqueueSettings(message_id_domain="example.com")
RENDERER = Renderer(None, mail_from="Shop <shop@example.com>", clock=lambda: NOW)
# What the renderer refuses in a header: each must be refused at enqueue already.
CONTROLS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1b", "\x07", "\x7f", "\x01"]


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(messages)).scalar_one())


def _enqueue(engine: Engine, **kw: Any) -> Any:
    kw.setdefault("to", "ann@example.com")
    if "template" not in kw:
        kw.setdefault("subject", "Hello")
        kw.setdefault("text", "Body")
    with engine.begin() as conn:
        return enqueue(conn, settings=SETTINGS, **kw)


@pytest.mark.parametrize("char", CONTROLS, ids=lambda c: f"U+{ord(c):04X}")
def test_control_characters_the_renderer_refuses_are_refused_at_enqueue(
    engine: Engine, char: str,
) -> None:
    with pytest.raises(RenderError):  # the premise: the worker would fail on it
        RENDERER.render(claimed(subject=f"Order {char} shipped"))
    with pytest.raises(InvalidMessage) as caught:
        _enqueue(engine, subject=f"Order {char} shipped")
    assert caught.value.field == "subject"
    with pytest.raises(InvalidMessage) as caught:
        _enqueue(engine, headers={"X-Ref": f"a{char}b"})
    assert caught.value.field.startswith("headers")
    assert _count(engine) == 0


@pytest.mark.parametrize("sender", ['"Example Inc." <billing@example.com>',
                                    '"Doe, John" <john@example.com>'])
def test_quoted_display_names_are_kept_and_render(engine: Engine, sender: str) -> None:
    _enqueue(engine, sender=sender)
    with engine.connect() as conn:
        stored = conn.execute(select(messages.c.sender)).scalar_one()
    assert stored == sender
    envelope = RENDERER.render(claimed(sender=stored))
    assert f"{envelope.sender.name!r}" in (repr("Example Inc."), repr("Doe, John"))


def test_a_sender_with_two_addresses_is_refused(engine: Engine) -> None:
    with pytest.raises(InvalidMessage, match="exactly one") as caught:
        _enqueue(engine, sender="x@a.example.com, y@b.example.com")
    assert caught.value.field == "sender"


def test_deep_or_self_referential_params_are_invalid_message(engine: Engine, tmp_path: Any
                                                             ) -> None:
    deep: Any = "leaf"
    for _ in range(990):
        deep = {"n": deep}
    loop: dict[str, Any] = {}
    loop["self"] = loop
    listed: list[Any] = []
    listed.append(listed)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "subject.txt").write_text("x")
    (tmp_path / "t" / "text.txt").write_text("x")
    settings = EnqueueSettings(templates_dir=tmp_path, message_id_domain="example.com")
    for params in ({"deep": deep}, loop, {"items": listed}):
        with pytest.raises(InvalidMessage) as caught, engine.begin() as conn:
            enqueue(conn, to="ann@example.com", template="t", params=params,
                    settings=settings)
        assert caught.value.field == "params"
    assert _count(engine) == 0


@pytest.mark.parametrize("expires", [math.inf, 1e300, timedelta(days=999_999), math.nan])
def test_an_expiry_out_of_range_is_invalid_message_and_the_transaction_lives_on(
    engine: Engine, expires: Any,
) -> None:
    with engine.begin() as conn:
        with pytest.raises(InvalidMessage) as caught:
            enqueue(conn, to="ann@example.com", subject="Hi", text="x", expires_in=expires,
                    settings=SETTINGS)
        assert caught.value.field == "expires_in"
        # The caller's transaction was not aborted: it goes on and commits.
        enqueue(conn, to="bob@example.com", subject="Hi", text="x", settings=SETTINGS)
    with engine.connect() as conn:
        assert conn.execute(select(messages.c.expires_at)).scalar_one() is not None


def test_a_send_at_out_of_range_is_invalid_message(engine: Engine) -> None:
    with pytest.raises(InvalidMessage) as caught:
        _enqueue(engine, send_at=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC))
    assert caught.value.field == "send_at"


def test_a_conflicting_batch_writes_nothing_even_when_the_caller_commits(
    engine: Engine,
) -> None:
    _enqueue(engine, key="taken", subject="First")
    batch = [Message(to=f"u{i}@example.com", subject="Hi", text="x", key=f"new-{i}")
             for i in range(3)]
    batch.append(Message(to="ann@example.com", subject="Other", text="x", key="taken"))
    with engine.begin() as conn, pytest.raises(IdempotencyConflict):
        enqueue_many(conn, batch, settings=SETTINGS)
        # The caller catches the error and commits its own work anyway.
    assert _count(engine) == 1
    with engine.begin() as conn:  # and the keys are free for a corrected batch
        enqueue_many(conn, batch[:3], settings=SETTINGS)
    assert _count(engine) == 4


@pytest.mark.parametrize("name", ["Resent-Bcc", "Resent-To", "Resent-From", "Received",
                                  "DKIM-Signature", "ARC-Seal", "Authentication-Results",
                                  "Delivered-To", "X-Original-To"])
def test_trace_resent_and_signature_fields_are_refused(engine: Engine, name: str) -> None:
    with pytest.raises(InvalidMessage, match=name) as caught:
        _enqueue(engine, headers={name: "x@example.com"})
    assert caught.value.field == "headers"


def test_the_subject_is_stored_as_it_is_delivered(engine: Engine) -> None:
    _enqueue(engine, subject="  Your order shipped\t ")
    with engine.connect() as conn:
        stored = conn.execute(select(messages.c.subject)).scalar_one()
    delivered = RENDERER.render(claimed(subject=stored)).subject
    assert stored == delivered == "Your order shipped"


@pytest.mark.parametrize("raw", ["1e300", "400000000"])
def test_an_age_limit_no_enqueue_could_use_is_refused_by_the_settings(raw: str) -> None:
    # 1e300 used to pass the settings check, and then every enqueue failed.
    with pytest.raises(ConfigError) as caught:
        EnqueueSettings.from_env({"MAILOUT_MAX_AGE_SECONDS": raw})
    assert caught.value.setting == "MAILOUT_MAX_AGE_SECONDS"
    with pytest.raises(ConfigError, match="MAILOUT_QUEUE_POLICIES"):
        EnqueueSettings.from_env({"MAILOUT_QUEUE_POLICIES": f"bulk:max_age={raw}"})


def test_the_longest_age_limit_the_settings_accept_enqueues(engine: Engine) -> None:
    settings = EnqueueSettings.from_env({"MAILOUT_MAX_AGE_SECONDS": str(MAX_AGE_SECONDS),
                                         "MAILOUT_MESSAGE_ID_DOMAIN": "example.com"})
    with engine.begin() as conn:
        assert enqueue(conn, to="a@example.com", subject="Hi", text="x", key="far",
                       settings=settings).created


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database with no mailout tables, on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    if request.param == "postgresql":
        url = create_database(request.getfixturevalue("pg_server_url"))
        yield url
        drop_database(url)
        return
    server = mysql.mysql_server_url()
    if server is None:
        pytest.skip(mysql.SKIP_REASON)
    url = mysql.create_database(server)
    yield url
    mysql.drop_database(url)


def test_enqueue_on_an_unmigrated_database_says_which_command_creates_the_tables(
    unmigrated_url: str,
) -> None:
    # Before: the driver's 'relation "mailout_messages" does not exist' (or 'no such
    # table', or 1146) reached the application, naming nothing to run.
    engine = db.make_engine(unmigrated_url)
    try:
        with pytest.raises(SchemaMissing, match="mailout db upgrade"), engine.begin() as conn:
            enqueue(conn, to="a@example.com", subject="Hi", text="x", key="k",
                    settings=SETTINGS)
    finally:
        engine.dispose()
