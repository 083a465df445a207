"""Django on PostgreSQL: the backend's wake-up goes after Django's commit
(``transaction.on_commit``), never inside the atomic block, and not at all on rollback."""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.core.mail import send_mail
from django.db import transaction
from sqlalchemy import Engine

from mailout.db.notifications import libpq_url
from tests.support.django_fixtures import BACKEND

pytestmark = pytest.mark.django_db(databases=["default", "postgres"], transaction=True)
PREFIX = f"t{uuid.uuid4().hex[:8]}-"  # this module's queues
WAIT = 30.0  # seconds a notification may take on a loaded machine before the test fails


@pytest.fixture
def heard(settings: object, outside_engine_pg: Engine) -> Iterator[queue.Queue[str]]:
    """Notifications on mailout's channel of the Django ``postgres`` database."""
    settings.EMAIL_BACKEND = BACKEND  # type: ignore[attr-defined]  # pytest-django's wrapper
    settings.MAILOUT_DATABASE = "postgres"  # type: ignore[attr-defined]
    got: queue.Queue[str] = queue.Queue()
    ready, stop = threading.Event(), threading.Event()
    url = outside_engine_pg.url.render_as_string(hide_password=False)

    def listen() -> None:
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            conn.execute("LISTEN mailout")
            ready.set()
            while not stop.is_set():
                for note in conn.notifies(timeout=0.05):
                    if note.payload.startswith(PREFIX):  # not an earlier test's late one
                        got.put(note.payload.removeprefix(PREFIX))

    listener = threading.Thread(target=listen)
    listener.start()
    assert ready.wait(10)
    yield got
    stop.set()
    listener.join(10)


@pytest.fixture
def outside_engine_pg(django_db_blocker: object, _pg_sessions_closed: None) -> Iterator[Engine]:
    from mailout import db
    from mailout.contrib.django.connection import database_url

    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        url = database_url("postgres")
    engine = db.make_engine(url)
    yield engine
    engine.dispose()


def test_the_wake_up_follows_the_commit_and_a_rollback_sends_none(
    heard: queue.Queue[str], settings: object,
) -> None:
    def place_then_fail() -> None:
        with transaction.atomic(using="postgres"):
            send_mail("Order A1", "Thanks!", None, ["a1@example.com"])
            raise RuntimeError("payment failed")

    settings.MAILOUT_QUEUE = PREFIX + "rolled-back"  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        place_then_fail()
    settings.MAILOUT_QUEUE = PREFIX + "committed"  # type: ignore[attr-defined]
    with transaction.atomic(using="postgres"):
        send_mail("Order A2", "Thanks!", None, ["a2@example.com"])
    # A wake-up for the rolled-back message would have come first.
    assert heard.get(timeout=WAIT) == "committed"
