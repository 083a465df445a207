"""The Django admin pages for messages, driven through Django's test client as an
operator would: list, filter, search, detail with the attempt log, and the actions,
which follow the CLI's rules, ask first, and log who did what."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.mail import EmailMessage
from django.test import Client
from sqlalchemy import Engine, insert, select, update

from mailout import db
from mailout.db.schema import attempts, audit, messages
from tests.support.django_fixtures import DATABASES

pytestmark = pytest.mark.django_db(databases=list(DATABASES), transaction=True)

CHANGELIST = "/admin/mailout/message/"


def _queue(key: str, to: str = "ann@example.com") -> None:
    EmailMessage(f"Subject {key}", "Body", None, [to], headers={"X-Mailout-Key": key}).send()


def _row(engine: Engine, key: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(select(messages).where(messages.c.idempotency_key == key)).one()


def _set_status(engine: Engine, key: str, status: str) -> int:
    with engine.begin() as conn:
        conn.execute(update(messages).where(messages.c.idempotency_key == key)
                     .values(status=status, attempts=3))
    return int(_row(engine, key).id)


def _operator(username: str, *codenames: str) -> Client:
    user = User.objects.create_user(username, password="pw-for-tests", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="mailout",
                                                         codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def alice(using: str) -> Client:
    return _operator("alice", "view_message", "act_on_message")


def test_the_list_filters_and_searches(alice: Client, outside_engine: Engine) -> None:
    _queue("order-1", "ann@example.com")
    _queue("order-2", "bob@example.com")
    _set_status(outside_engine, "order-2", "dead")
    page = alice.get(CHANGELIST, {"status__exact": "dead"}).content.decode()
    assert "bob@example.com" in page
    assert "ann@example.com" not in page
    assert "bob@example.com" not in alice.get(CHANGELIST, {"q": "order-1"}).content.decode()
    message_id = _row(outside_engine, "order-1").message_id
    assert "ann@example.com" in alice.get(CHANGELIST, {"q": message_id}).content.decode()
    assert "ann@example.com" in alice.get(CHANGELIST, {"q": "ann@"}).content.decode()


def test_the_detail_page_shows_the_attempt_log(alice: Client, outside_engine: Engine) -> None:
    _queue("order-3")
    row = _row(outside_engine, "order-3")
    with outside_engine.begin() as conn:
        conn.execute(insert(attempts).values(
            outbox_id=row.id, attempt=1, outcome="retry", stage="rcpt", reply_code=451,
            enhanced_code="4.7.1", reply_text="Greylisted <try later>", started_at=row.created_at,
            finished_at=row.created_at))
    page = alice.get(f"{CHANGELIST}{row.id}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "Greylisted &lt;try later&gt;" in text  # escaped
    assert "4.7.1" in text


def _post_action(client: Client, action: str, ids: list[int], **extra: str) -> Any:
    return client.post(CHANGELIST, {"action": action, "_selected_action": [str(i) for i in ids],
                                    **extra})


def test_retry_asks_first_then_requeues_and_logs_who(
    alice: Client, outside_engine: Engine,
) -> None:
    _queue("order-4")
    _queue("order-5")
    dead = _set_status(outside_engine, "order-4", "dead")
    pending = _row(outside_engine, "order-5").id
    confirm = _post_action(alice, "retry", [dead, pending])
    assert confirm.status_code == 200
    assert b"Requeue?" in confirm.content
    assert _row(outside_engine, "order-4").status == "dead"  # nothing done yet
    done = _post_action(alice, "retry", [dead, pending], confirmed="yes", reason="relay fixed")
    assert done.status_code == 302
    after = _row(outside_engine, "order-4")
    assert (after.status, after.attempts) == ("pending", 0)
    assert _row(outside_engine, "order-5").status == "pending"  # left alone: not reviewed-dead
    with outside_engine.connect() as conn:
        entry = conn.execute(select(audit)).one()
    assert (entry.actor, entry.action, entry.reason, entry.changed, entry.skipped) == (
        "alice (django admin)", "retry", "relay fixed", 1, 1)
    page = alice.get(f"{CHANGELIST}{dead}/change/").content.decode()
    assert "alice (django admin): retry (relay fixed)" in page
    assert "&lt;div&gt;" not in page  # the history is markup, its values escaped


def test_cancel_and_resolve_follow_the_clis_rules(alice: Client, outside_engine: Engine) -> None:
    _queue("order-6")
    _queue("order-7")
    pending = _row(outside_engine, "order-6").id
    unknown = _set_status(outside_engine, "order-7", "unknown")
    _post_action(alice, "cancel", [pending, unknown], confirmed="yes")
    assert _row(outside_engine, "order-6").status == "cancelled"
    assert _row(outside_engine, "order-7").status == "unknown"  # not pending: untouched
    _post_action(alice, "resolve_as_sent", [pending, unknown], confirmed="yes")
    assert _row(outside_engine, "order-7").status == "sent"
    assert _row(outside_engine, "order-6").status == "cancelled"


def test_acting_needs_its_own_permission(using: str, outside_engine: Engine) -> None:
    _queue("order-8")
    dead = _set_status(outside_engine, "order-8", "dead")
    viewer = _operator("victor", "view_message")
    assert viewer.get(CHANGELIST).status_code == 200
    assert b"Retry reviewed" not in viewer.get(CHANGELIST).content
    assert _post_action(viewer, "retry", [dead], confirmed="yes").status_code == 403
    assert _row(outside_engine, "order-8").status == "dead"
    stranger = _operator("sam")
    assert stranger.get(CHANGELIST).status_code == 403
    assert stranger.get(f"{CHANGELIST}{dead}/change/").status_code == 403


def test_actions_on_sqlite_succeed_while_a_worker_keeps_committing(
    outside_engine: Engine, using: str,
) -> None:
    """The admin's actions read, then write. On SQLite a deferred transaction that read
    before another connection (a worker's claim) committed cannot write: SQLITE_BUSY at
    once, whatever the busy timeout. The action is run again when it owns the
    transaction, so an operator does not get a 500 because a worker was busy."""
    if using != "default":
        pytest.skip("SQLite only: PostgreSQL and MariaDB wait for the lock instead")
    for i in range(21):
        _queue(f"busy-{i}")
    ids = [_set_status(outside_engine, f"busy-{i}", "dead") for i in range(1, 21)]
    churned = _row(outside_engine, "busy-0").id
    client = _operator("alice", "view_message", "act_on_message")
    stop = threading.Event()

    def commit_like_a_worker() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            with db.immediate(outside_engine) as conn:
                conn.execute(update(messages).where(messages.c.id == churned)
                             .values(priority=n % 100))
            time.sleep(0.001)

    churn = threading.Thread(target=commit_like_a_worker)
    churn.start()
    try:
        replies = [_post_action(client, "retry", [rid], confirmed="yes") for rid in ids]
    finally:
        stop.set()
        churn.join()
    assert [r.status_code for r in replies] == [302] * 20
    assert {_row(outside_engine, f"busy-{i}").status for i in range(1, 21)} == {"pending"}


def test_an_unmigrated_outbox_database_is_named_not_a_server_error(
    alice: Client, using: str,
) -> None:
    from mailout.contrib.django.schema_sync import downgrade_to, upgrade_to

    downgrade_to(using, "base")
    try:
        for url in (CHANGELIST, f"{CHANGELIST}1/change/"):
            page = alice.get(url)
            assert page.status_code == 503
            text = page.content.decode()
            assert f"database {using!r} has no mailout tables".replace("'", "&#x27;") in text
            assert "python manage.py migrate" in text
    finally:
        upgrade_to(using, "head")
