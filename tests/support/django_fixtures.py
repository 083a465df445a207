"""Fixtures for the test Django project (tests/djangoproject): its PostgreSQL database
on the test server, a ``using`` fixture that runs a test on both databases, and an
outbox emptied before each test (Django's flush leaves unmanaged tables alone)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.engine import make_url

from mailout import db
from mailout.db.schema import messages, metadata

DATABASES = ("default", "postgres")  # SQLite and PostgreSQL
BACKEND = "mailout.contrib.django.EmailBackend"


@pytest.fixture(scope="session")
def django_db_modify_db_settings(pg_server_url: str) -> None:
    """The project's ``postgres`` database lives on the test server."""
    from django.conf import settings

    url = make_url(pg_server_url)
    settings.DATABASES["postgres"].update(
        USER=url.username or "postgres", PASSWORD=url.password or "",
        HOST=url.host or "127.0.0.1", PORT=str(url.port or 5432))


@pytest.fixture(params=DATABASES)
def using(request: pytest.FixtureRequest, settings: object) -> str:
    """The Django database alias of this run; the backend writes there too."""
    alias: str = request.param
    # Django's test set-up swaps EMAIL_BACKEND for its in-memory one: put ours back.
    settings.EMAIL_BACKEND = BACKEND  # type: ignore[attr-defined]  # pytest-django's wrapper
    settings.MAILOUT_DATABASE = alias  # type: ignore[attr-defined]
    return alias


@pytest.fixture
def outside_engine(using: str, django_db_blocker: object) -> Iterator[Engine]:
    """A SQLAlchemy engine of its own on the same database: it sees committed rows
    only, as a worker does. The outbox is emptied first."""
    from mailout.contrib.django.connection import database_url

    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        url = database_url(using)
    engine = db.make_engine(url)
    with engine.begin() as conn:
        for table in reversed(metadata.sorted_tables):
            conn.execute(table.delete())
    yield engine
    engine.dispose()


def count_messages(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(messages)).scalar_one())


def count_orders(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM shop_order")).scalar_one())


def worker_env(pg_server_url: str) -> dict[str, str]:
    """The environment of a ``manage.py`` process that opens this run's test databases."""
    return {**os.environ, "MAILOUT_DJANGO_TEST_DATABASES": "1",
            "MAILOUT_TEST_POSTGRES_URL": pg_server_url,
            "DJANGO_SETTINGS_MODULE": "tests.djangoproject.settings"}
