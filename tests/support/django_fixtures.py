"""Fixtures for the test Django project (tests/djangoproject): its PostgreSQL database
on the test server, a ``using`` fixture that runs a test on both databases, and an
outbox emptied before each test (Django's flush leaves unmanaged tables alone)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.support.smtpserver import SmtpTestServer
from bench.support.workers import worker_env
from sqlalchemy import Engine, func, select, text
from sqlalchemy.engine import make_url

from mailout import db
from mailout.db.schema import messages, metadata

# SQLite and PostgreSQL, and MariaDB when MAILOUT_TEST_MYSQL_URL names a server.
MARIADB = ("mariadb",) if os.environ.get("MAILOUT_TEST_MYSQL_URL") else ()
DATABASES = ("default", "postgres", *MARIADB)
BACKEND = "mailout.contrib.django.EmailBackend"


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None,
                                 pg_server_url: str) -> None:
    """The project's ``postgres`` database lives on the test server; under xdist each
    worker's test databases get its suffix (pytest-django's own fixture)."""
    from django.conf import settings

    url = make_url(pg_server_url)
    settings.DATABASES["postgres"].update(
        USER=url.username or "postgres", PASSWORD=url.password or "",
        HOST=url.host or "127.0.0.1", PORT=str(url.port or 5432))


@pytest.fixture(scope="session")
def _pg_sessions_closed(django_db_setup: None) -> Iterator[None]:
    """Before Django drops the PostgreSQL test database: end the sessions that engines
    of mailout commands run in-process (``call_command``) left in their pools."""
    yield
    import psycopg
    from django.conf import settings

    conf = settings.DATABASES["postgres"]
    with psycopg.connect(host=conf["HOST"], port=conf["PORT"], user=conf["USER"],
                         password=conf["PASSWORD"], dbname="postgres", autocommit=True) as c:
        c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                  "WHERE datname = %s AND pid <> pg_backend_pid()", (conf["NAME"],))


@pytest.fixture(params=DATABASES)
def using(request: pytest.FixtureRequest, settings: object, _pg_sessions_closed: None) -> str:
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


ROOT = Path(__file__).resolve().parents[2]


def manage_py(*args: str, pg_server_url: str, server: SmtpTestServer,
              **extra: str) -> subprocess.CompletedProcess[str]:
    """``manage.py <args>`` of the test project in a process of its own, on this run's
    test databases, its worker sending to ``server``. No database URL is given: the
    command finds it in DATABASES."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MAILOUT_", "SMTP_"))}
    env.update(worker_env("", server, **extra))
    del env["MAILOUT_DATABASE_URL"]
    from django.conf import settings

    # The test databases of this process (pytest-django renamed them: test_..., and a
    # suffix per xdist worker).
    env.update(MAILOUT_DJANGO_SQLITE_NAME=settings.DATABASES["default"]["NAME"],
               MAILOUT_DJANGO_POSTGRES_NAME=settings.DATABASES["postgres"]["NAME"],
               **({"MAILOUT_DJANGO_MARIADB_NAME": settings.DATABASES["mariadb"]["NAME"],
                   "MAILOUT_TEST_MYSQL_URL": os.environ["MAILOUT_TEST_MYSQL_URL"]}
                  if MARIADB else {}),
               MAILOUT_TEST_POSTGRES_URL=pg_server_url,
               DJANGO_SETTINGS_MODULE="tests.djangoproject.settings")
    return subprocess.run([sys.executable, "-m", "tests.djangoproject.manage", *args],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)
