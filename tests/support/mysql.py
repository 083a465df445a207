"""MariaDB / MySQL for tests: the server named by ``MAILOUT_TEST_MYSQL_URL``.

There is no embedded fallback: without the variable the MariaDB parameter of every
storage test is skipped, with the reason shown in pytest's summary (``-ra``).
``.ci/run`` starts the local MariaDB and sets the variable.

``create_database(server_url)`` makes a uniquely named database on that server and
returns its URL; ``drop_database(url)`` drops it.
"""

from __future__ import annotations

import os
import uuid

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from mailout import db

ENV_VAR = "MAILOUT_TEST_MYSQL_URL"
SKIP_REASON = f"MariaDB/MySQL tests need {ENV_VAR} (e.g. mysql://root@127.0.0.1:3306/test)"


def mysql_server_url() -> str | None:
    """The configured server URL with mailout's driver, or None when unset."""
    configured = os.environ.get(ENV_VAR)
    return db.database_url(configured) if configured else None


def _admin(server_url: str, statement: str) -> None:
    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(statement))
    finally:
        engine.dispose()


def create_database(server_url: str) -> str:
    """Create a fresh, uniquely named database (the server's default, case-insensitive
    collation: mailout's tables must bring their own); return its URL."""
    name = f"mailout_test_{uuid.uuid4().hex[:12]}"
    _admin(server_url, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    """Drop a database made by :func:`create_database`."""
    target = make_url(url)
    assert target.database
    assert target.database.startswith("mailout_test_")
    _admin(url, f"DROP DATABASE IF EXISTS `{target.database}`")
