"""Migrations: apply, print and check mailout's versioned Alembic history.

mailout keeps its revision in its own version table, so it never collides with the
application's Alembic history in the same database.

Checking the schema (:func:`require_schema`, run by every worker and CLI command at
start) needs no Alembic: the current revision is one SELECT, and the newest
revision is read from the migration files' ``revision`` and ``down_revision``
lines. Alembic (and Mako) load only to apply or print migrations, which keeps a
worker's start-up short.
"""

from __future__ import annotations

import functools
import io
import re
from importlib.resources import files
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text

from mailout.exceptions import SchemaMissing

if TYPE_CHECKING:
    from alembic.config import Config

VERSION_TABLE = "mailout_alembic_version"
_REVISION_LINE = re.compile(
    r"""^(down_revision|revision)\s*(?::[^=]*)?=\s*(?:"([^"]*)"|'([^']*)'|None)\s*$""", re.M)
_VERSION_QUERY = text(f"SELECT version_num FROM {VERSION_TABLE}")  # noqa: S608 - a constant


def _alembic_config(url: str) -> Config:
    from alembic.config import Config  # Alembic only to apply or print migrations

    cfg = Config()
    cfg.set_main_option("script_location", str(files("mailout.db") / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` on ``engine``'s database. Idempotent."""
    from alembic import command

    cfg = _alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def upgrade_connection(conn: Connection, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` on ``conn``, in the transaction its owner
    holds (a borrowed connection: Django's ``migrate`` runs them this way)."""
    from alembic import command

    cfg = _alembic_config(conn.engine.url.render_as_string(hide_password=False))
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, revision)


def current_revision_on(conn: Connection) -> str | None:
    """:func:`current_revision` on an open connection (a borrowed one, too)."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    version: str | None = conn.execute(_VERSION_QUERY).scalar()
    return version


def upgrade_database(engine: Engine) -> None:
    """Create or update mailout's tables on ``engine``'s database, as ``mailout db
    upgrade`` does (``mailout.upgrade_database``). Idempotent; runs in its own
    transaction. Teams that run their own migrations use ``mailout db sql`` instead."""
    upgrade(engine)


def migration_sql(dialect: str = "postgresql", revision: str = "head") -> str:
    """The migrations as plain SQL for ``dialect``, for teams that run their own."""
    from alembic import command

    cfg = _alembic_config(f"{dialect}://")
    buf = io.StringIO()
    cfg.output_buffer = buf
    command.upgrade(cfg, revision, sql=True)
    return buf.getvalue()


@functools.cache
def head_revision() -> str:
    """The newest revision shipped: the one no other migration names as its parent.

    Read from the files' ``revision = "..."`` and ``down_revision = "..."`` lines
    (a test checks it agrees with Alembic's own answer). Raises RuntimeError when the
    history is not one straight line.
    """
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (files("mailout.db") / "migrations" / "versions").iterdir():
        if not path.name.endswith(".py") or path.name.startswith("__"):
            continue
        for name, double, single in _REVISION_LINE.findall(path.read_text(encoding="utf-8")):
            value = double or single
            if value:
                (revisions if name == "revision" else parents).add(value)
    heads = revisions - parents
    if len(heads) != 1:
        raise RuntimeError(f"mailout's migrations must have one head, found {sorted(heads)}")
    return heads.pop()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at; None when mailout's tables were never made."""
    with engine.connect() as conn:
        return current_revision_on(conn)


def require_schema(engine: Engine) -> None:
    """Raise :class:`SchemaMissing` unless the database is at the newest revision."""
    current = current_revision(engine)
    head = head_revision()
    if current != head:
        found = "no mailout tables" if current is None else f"revision {current}"
        raise SchemaMissing(
            f"the database has {found}, this mailout needs revision {head}: "
            "run `mailout db upgrade`"
        )
