"""Migrations: apply, print and check mailout's versioned Alembic history.

mailout keeps its revision in its own version table, so it never collides with the
application's Alembic history in the same database.
"""

from __future__ import annotations

import io
from importlib.resources import files

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from mailout.exceptions import SchemaMissing

VERSION_TABLE = "mailout_alembic_version"


def _alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(files("mailout.db") / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` on ``engine``'s database. Idempotent."""
    cfg = _alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def migration_sql(dialect: str = "postgresql", revision: str = "head") -> str:
    """The migrations as plain SQL for ``dialect``, for teams that run their own."""
    cfg = _alembic_config(f"{dialect}://")
    buf = io.StringIO()
    cfg.output_buffer = buf
    command.upgrade(cfg, revision, sql=True)
    return buf.getvalue()


def head_revision() -> str:
    script = ScriptDirectory.from_config(_alembic_config("sqlite://"))
    head = script.get_current_head()
    assert head is not None  # the package ships at least one migration
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return ctx.get_current_revision()


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
