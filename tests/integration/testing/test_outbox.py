"""mailout.testing's ``outbox`` fixture, as an application's test suite uses it, on
SQLite and PostgreSQL: assert_enqueued reads the real rows, deliver_all runs the
real worker in this process and returns the rendered messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine

from mailout import Attachment
from mailout.outbox import enqueue
from mailout.testing import Outbox
from mailout.transports.base import Decision

TEMPLATES = Path(__file__).resolve().parents[3] / "examples" / "templates"


@pytest.fixture
def mailout_database_url(db_url: str) -> str:
    """The suite's migrated, emptied database instead of the plugin's SQLite file."""
    return db_url


@pytest.fixture
def mailout_templates() -> Path:
    return TEMPLATES


def _order(engine: Engine, number: str, to: str) -> None:
    with engine.begin() as conn:
        enqueue(conn, to=to, template="order_confirmation", key=f"order-{number}",
                params={"order_id": number, "customer_name": "Ann", "total": 9.9,
                        "currency": "EUR",
                        "items": [{"name": "Tea", "quantity": 1, "price": 9.9}]})


def test_assert_enqueued_matches_and_explains_a_miss(outbox: Outbox, engine: Engine) -> None:
    _order(engine, "1", "ann@example.com")
    _order(engine, "2", "Bob@Example.com")
    [found] = outbox.assert_enqueued(to="bob@example.com", template="order_confirmation")
    assert found.key == "order-2"
    assert len(outbox.assert_enqueued(template="order_confirmation", count=2)) == 2
    with pytest.raises(AssertionError, match=r"expected 1 message\(s\) with to='eve@"):
        outbox.assert_enqueued(to="eve@example.com", count=1)
    with pytest.raises(AssertionError, match=r"#1 to=ann@example\.com"):
        outbox.assert_enqueued(template="password_reset")


def test_deliver_all_returns_the_rendered_messages_once(outbox: Outbox, engine: Engine) -> None:
    _order(engine, "7", "ann@example.com")
    with engine.begin() as conn:
        enqueue(conn, to="c@example.com", subject="Your file", text="Attached.",
                attachments=[Attachment("a.txt", b"hello")])
    delivered = outbox.deliver_all()
    assert [e.to[0].address for e in delivered] == ["ann@example.com", "c@example.com"]
    confirmation, with_file = delivered
    assert "7" in confirmation.subject
    assert confirmation.text is not None
    assert "Ann" in confirmation.text
    assert [(a.filename, a.content) for a in with_file.attachments] == [("a.txt", b"hello")]
    assert b"Subject: Your file" in with_file.wire
    assert outbox.deliver_all() == []
    assert {m.status for m in outbox.queued()} == {"sent"}


def test_a_scripted_refusal_ends_failed(outbox: Outbox, engine: Engine) -> None:
    _order(engine, "8", "ann@example.com")
    outbox.transport.script(Decision.FAILED)
    assert outbox.deliver_all() == []
    assert [m.status for m in outbox.queued()] == ["failed"]
