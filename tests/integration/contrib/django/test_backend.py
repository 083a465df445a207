"""The Django backend writes outbox rows in the caller's transaction, on both databases.

Each test asserts the business row (an Order) and the outbox row together, read by
an engine of its own: what a worker would see after the commit.
"""

from __future__ import annotations

import logging
import sqlite3
from email import message_from_bytes, policy

import pytest
from django.core.mail import EmailMultiAlternatives, send_mail
from django.db import transaction
from django.test import Client
from sqlalchemy import Connection, Engine, select, update
from sqlalchemy.exc import OperationalError

from mailout.contrib.django.connection import run_borrowed
from mailout.db import borrowed
from mailout.db.engine import LOCK_CONFLICT_TRIES
from mailout.db.schema import message_attachments, messages
from tests.djangoproject.shop.models import Order
from tests.support.django_fixtures import DATABASES, count_messages, count_orders

pytestmark = pytest.mark.django_db(databases=list(DATABASES), transaction=True)


def _order_and_mail(using: str, number: str) -> None:
    Order.objects.using(using).create(number=number, email=f"{number}@example.com")
    send_mail(f"Order {number}", "Thanks!", None, [f"{number}@example.com"])


def test_commit_queues_the_message_with_the_order(using: str, outside_engine: Engine) -> None:
    with transaction.atomic(using=using):
        _order_and_mail(using, "A1")
        assert count_messages(outside_engine) == 0  # not before the commit
    assert (count_orders(outside_engine), count_messages(outside_engine)) == (1, 1)


def test_rollback_queues_nothing(using: str, outside_engine: Engine) -> None:
    def place_then_fail() -> None:
        with transaction.atomic(using=using):
            _order_and_mail(using, "A1")
            raise RuntimeError("payment failed")

    with pytest.raises(RuntimeError):
        place_then_fail()
    assert (count_orders(outside_engine), count_messages(outside_engine)) == (0, 0)


def test_a_rolled_back_savepoint_takes_only_its_own_message(
    using: str, outside_engine: Engine,
) -> None:
    def second_order_fails() -> None:
        with transaction.atomic(using=using):
            _order_and_mail(using, "A2")
            raise RuntimeError("the second order failed")

    with transaction.atomic(using=using):
        _order_and_mail(using, "A1")
        with pytest.raises(RuntimeError):
            second_order_fails()  # its savepoint is rolled back
        _order_and_mail(using, "A3")
    assert (count_orders(outside_engine), count_messages(outside_engine)) == (2, 2)
    with outside_engine.connect() as conn:
        to = set(conn.scalars(select(messages.c.recipient)))
    assert to == {"A1@example.com", "A3@example.com"}


def test_the_first_borrow_of_a_process_leaves_the_transaction_alone(
    using: str, outside_engine: Engine, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's workaround lost the order here: SQLAlchemy's first-connect set-up
    rolled back Django's transaction. The first borrow now only reads."""
    monkeypatch.setattr(borrowed, "_ENGINES", {})
    monkeypatch.setattr(borrowed, "_INITIALISED", set())
    with transaction.atomic(using=using):
        _order_and_mail(using, "A1")
    assert (count_orders(outside_engine), count_messages(outside_engine)) == (1, 1)


def test_outside_any_atomic_block_the_message_commits_by_itself(
    using: str, outside_engine: Engine,
) -> None:
    send_mail("Hello", "Body", None, ["x@example.com"])
    assert count_messages(outside_engine) == 1


@pytest.mark.parametrize(("query", "status", "expected"), [("", 201, (1, 1)),
                                                           ("?fail=1", 500, (0, 0))])
def test_atomic_requests_commit_or_roll_back_the_view(
    using: str, outside_engine: Engine, query: str, status: int, expected: tuple[int, int],
) -> None:
    client = Client(raise_request_exception=False)
    reply = client.post(f"/orders/{using}/{query}", {"number": "B1", "email": "b@example.com"})
    assert reply.status_code == status
    assert (count_orders(outside_engine), count_messages(outside_engine)) == expected


def test_a_django_message_is_stored_whole_with_its_envelope(
    using: str, outside_engine: Engine,
) -> None:
    email = EmailMultiAlternatives(
        "Your invoice", "Plain text", "Billing <billing@example.com>",
        ["Ann <ann@example.com>"], bcc=["audit@example.com"], cc=["cc@example.com"],
        reply_to=["help@example.com"],
        headers={"X-Campaign": "invoices", "X-Mailout-Key": "invoice-7"},
    )
    email.attach_alternative("<p>HTML</p>", "text/html")
    email.attach("invoice.pdf", b"%PDF-1.4 fake", "application/pdf")
    email.attach("notes.txt", "caf\u00e9", "text/plain")
    assert email.send() == 1
    with outside_engine.connect() as conn:
        row = conn.execute(select(messages)).one()
        parts = conn.execute(select(message_attachments.c.filename)).all()
    assert row.idempotency_key == "invoice-7"
    parsed = message_from_bytes(bytes(row.mime), policy=policy.default)
    assert parsed["X-Campaign"] == "invoices"
    assert "X-Mailout-Key" not in parsed  # read, not sent
    assert "Bcc" not in parsed  # in the envelope only, as Django's SMTP backend sends it
    assert row.message_id == parsed["Message-ID"]
    assert [p.get_filename() for p in parsed.iter_attachments()] == ["invoice.pdf",
                                                                     "notes.txt"]
    assert parts == []  # the files travel inside the stored message, not twice
    assert (row.subject, row.body_text, row.body_html, row.headers) == (
        "Your invoice", None, None, None)
    assert row.sender == "billing@example.com"  # the envelope sender
    assert row.addresses == {"to": [["Ann", "ann@example.com"]], "cc": [["", "cc@example.com"]],
                             "bcc": [["", "audit@example.com"]]}


def test_the_same_key_twice_queues_one_message(using: str, outside_engine: Engine) -> None:
    for _ in range(2):
        send_mail("Reset", "Link", None, ["r@example.com"])  # no key: two messages
    email_headers = {"X-Mailout-Key": "reset-1"}
    from django.core.mail import EmailMessage

    for _ in range(2):
        EmailMessage("Reset", "Link", None, ["k@example.com"], headers=email_headers).send()
    assert count_messages(outside_engine) == 3


def test_send_mass_mail_queues_all_or_nothing(using: str, outside_engine: Engine) -> None:
    from django.core.mail import send_mass_mail

    batch = (("A", "a", None, ["a@example.com"]), ("B", "b", None, ["b@example.com"]))

    def send_then_fail() -> None:
        with transaction.atomic(using=using):
            assert send_mass_mail(batch) == 2
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        send_then_fail()
    assert count_messages(outside_engine) == 0
    assert send_mass_mail(batch) == 2
    assert count_messages(outside_engine) == 2


def test_the_enqueue_helper_writes_in_the_callers_transaction(
    using: str, outside_engine: Engine,
) -> None:
    from mailout.contrib.django import enqueue

    def enqueue_then_fail() -> None:
        with transaction.atomic(using=using):
            enqueue(using=using, to="h@example.com", subject="Hi", text="x", key="helper-1")
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    assert count_messages(outside_engine) == 0
    with transaction.atomic(using=using):
        result = enqueue(using=using, to="h@example.com", subject="Hi", text="x", key="helper-1")
    assert result.created
    assert count_messages(outside_engine) == 1


def test_a_refused_message_raises_or_is_skipped_when_silent(
    using: str, outside_engine: Engine,
) -> None:
    from django.core.mail import EmailMessage, get_connection

    from mailout import InvalidMessage

    bad = EmailMessage("Hi", "x", None, ["good@example.com"], headers={"X-Bad": "a\r\nBcc: x"})
    good = EmailMessage("Hi", "x", None, ["good@example.com"])
    with pytest.raises(InvalidMessage):
        get_connection().send_messages([good, bad])
    assert count_messages(outside_engine) == 0  # nothing half-written
    assert get_connection(fail_silently=True).send_messages([good, bad]) == 1
    assert count_messages(outside_engine) == 1


def test_a_message_refused_silently_is_logged_and_counted(
    using: str, outside_engine: Engine, caplog: pytest.LogCaptureFixture,
) -> None:
    """fail_silently (Django's error reporting uses it) drops nothing silently: the
    refusal is an ERROR line without the message's content, and a metric."""
    from django.core.mail import EmailMessage, get_connection
    from prometheus_client import REGISTRY

    def refused() -> float:
        return REGISTRY.get_sample_value("mailout_django_refused_total",
                                         {"field": "headers"}) or 0.0

    before = refused()
    bad = EmailMessage("Hi", "secret body", None, ["good@example.com"],
                       headers={"X-Bad": "a\r\nBcc: x"})
    with caplog.at_level(logging.ERROR, logger="mailout.contrib.django.backend"):
        assert get_connection(fail_silently=True).send_messages([bad]) == 0
    assert refused() == before + 1
    [record] = [r for r in caplog.records if r.name == "mailout.contrib.django.backend"]
    assert record.levelno == logging.ERROR
    assert record.event == "django_message_refused"  # type: ignore[attr-defined]
    assert "secret body" not in record.getMessage()
    assert "good@example.com" not in record.getMessage()
    assert count_messages(outside_engine) == 0


def test_borrowing_leaves_djangos_connection_as_django_made_it(
    using: str, outside_engine: Engine,
) -> None:
    """Django reads jsonb as text (it decodes JSONField itself) and keeps its own
    autocommit: after mailout wrote through the connection, both are unchanged."""
    from django.db import connections

    connection = connections[using]
    with transaction.atomic(using=using):
        _order_and_mail(using, "A1")
        with connection.cursor() as cur:
            cur.execute("SELECT '{\"a\": 1}'" + ("::jsonb" if using == "postgres" else ""))
            assert cur.fetchone()[0] == '{"a": 1}'
    assert connection.get_autocommit()
    assert not connection.in_atomic_block


def _refused_for_a_lock() -> OperationalError:
    """What SQLAlchemy raises when SQLite gives up on its busy timeout."""
    orig = sqlite3.OperationalError("database is locked")
    orig.sqlite_errorcode = 5  # type: ignore[attr-defined]  # set by sqlite3 itself
    return OperationalError("UPDATE mailout_messages ...", {}, orig)


def test_run_borrowed_runs_its_own_transaction_again_after_a_lock_conflict(
    using: str, outside_engine: Engine,
) -> None:
    tries: list[bool] = []

    def work(conn: Connection) -> int:
        tries.append(True)
        conn.execute(update(messages).values(priority=1))  # rolled back with the try
        if len(tries) < 3:
            raise _refused_for_a_lock()
        return len(tries)

    assert run_borrowed(using, work) == 3


def test_run_borrowed_leaves_the_callers_atomic_block_to_its_owner(
    using: str, outside_engine: Engine,
) -> None:
    tries: list[bool] = []

    def work(conn: Connection) -> None:
        tries.append(True)
        raise _refused_for_a_lock()

    with pytest.raises(OperationalError), transaction.atomic(using=using):
        run_borrowed(using, work)
    assert len(tries) == 1  # not run again: the caller's transaction is not ours to redo
    tries.clear()
    with pytest.raises(OperationalError):
        run_borrowed(using, work)
    assert len(tries) == LOCK_CONFLICT_TRIES  # its own: run again, then the last error
