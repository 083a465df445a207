"""The migrations create exactly the tables that schema.py describes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, bindparam, inspect, text

from mailout.db import migrate
from mailout.db.schema import MYSQL_CLAIM_INDEXES, metadata


def test_migrated_database_matches_the_table_definitions(engine: Engine) -> None:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={
            "compare_type": True,
            "version_table": migrate.VERSION_TABLE,
            "include_object": compared_on(engine),
        })
        diff = compare_metadata(ctx, metadata)
    assert diff == []


ORDERED = ("ix_mailout_messages_due", "ix_mailout_messages_pending_order")


def compared_on(engine: Engine) -> Callable[..., bool]:
    """Alembic's ``include_object`` for comparing a migrated database with schema.py:
    only our tables (the version table is Alembic's); no expression indexes (priority
    DESC), which Alembic cannot compare and test_claim_indexes_are_in_claim_order
    checks instead; no index schema.py makes only on other databases."""
    skipped = {*ORDERED, *MYSQL_CLAIM_INDEXES, *_not_made_on(engine)}
    return lambda _obj, name, kind, _reflected, _other: (
        name in metadata.tables if kind == "table" else name not in skipped)


def _not_made_on(engine: Engine) -> set[str]:
    """Indexes the table definitions make only on other databases (``ddl_if``), which
    Alembic's comparison does not know about."""
    out = set()
    for table in metadata.tables.values():
        for index in table.indexes:
            only = index._ddl_if.dialect if index._ddl_if is not None else None
            if only is not None and engine.dialect.name not in (
                    (only,) if isinstance(only, str) else only):
                out.add(str(index.name))
    return out


def test_claim_indexes_are_in_claim_order(engine: Engine) -> None:
    if engine.dialect.name == "mysql":
        with engine.connect() as conn:
            made = conn.execute(text("SHOW CREATE TABLE mailout_messages")).one()[1]
        assert ("KEY `ix_mailout_messages_claim_due` "
                "(`status`,`queue`,`priority` DESC,`next_attempt_at`,`id`)") in made
        assert ("KEY `ix_mailout_messages_claim_order` "
                "(`status`,`priority` DESC,`next_attempt_at`,`id`)") in made
        assert "ix_mailout_messages_due" not in made  # no partial index: not made at all
        return
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            defs = dict(conn.execute(text(
                "SELECT indexname, indexdef FROM pg_indexes WHERE indexname IN :names"
            ).bindparams(bindparam("names", expanding=True)), {"names": list(ORDERED)}).all())
        else:
            defs = dict(conn.execute(text(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index'")).all())
    assert "(queue, priority DESC, next_attempt_at, id)" in defs[ORDERED[0]]
    assert "(priority DESC, next_attempt_at, id)" in defs[ORDERED[1]]
    assert all("WHERE" in defs[name] and "'pending'" in defs[name] for name in ORDERED)


def test_partial_indexes_exist(engine: Engine) -> None:
    names = {ix["name"] for ix in inspect(engine).get_indexes("mailout_messages")}
    claim = (set(MYSQL_CLAIM_INDEXES) if engine.dialect.name == "mysql"
             else {"ix_mailout_messages_due", "ix_mailout_messages_leased"})
    assert {*claim, "ux_mailout_messages_key", "ux_mailout_messages_message_id"} <= names


def test_upgrade_is_idempotent_and_the_revision_is_current(engine: Engine) -> None:
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()
    migrate.require_schema(engine)


def test_plain_sql_is_available_for_both_dialects() -> None:
    pg = migrate.migration_sql("postgresql")
    assert "CREATE TABLE mailout_messages" in pg
    assert "JSONB" in pg
    assert "WHERE status = 'pending'" in pg
    assert "CREATE TABLE mailout_attempts" in migrate.migration_sql("sqlite")
    mysql = migrate.migration_sql("mysql")
    assert "COLLATE utf8mb4_bin" in mysql
    assert "DATETIME(6)" in mysql
    assert "IF NOT EXISTS" not in mysql  # MySQL 8 has no CREATE INDEX IF NOT EXISTS


def test_mysql_tables_compare_exactly_whatever_the_database_default(
    mysql_url: str,
) -> None:
    """The test database has the server's case-insensitive default collation; the
    migrated tables bring their own binary one, so keys differing in case are two."""
    from mailout import db
    from mailout.outbox import EnqueueSettings, enqueue

    engine = db.make_engine(mysql_url)
    settings = EnqueueSettings(message_id_domain="test.example.com")
    with engine.begin() as conn:
        first = enqueue(conn, to="a@example.com", subject="Hi", text="x", key="Order-1",
                        settings=settings)
        second = enqueue(conn, to="a@example.com", subject="Hi", text="x", key="order-1",
                         settings=settings)
        default = conn.exec_driver_sql("SELECT @@collation_database").scalar_one()
    assert not default.endswith("_bin")
    assert first.created
    assert second.created
    assert first.id != second.id
    engine.dispose()


def test_the_head_read_from_the_files_is_alembics_head() -> None:
    from alembic.script import ScriptDirectory

    config = migrate._alembic_config("sqlite://")
    alembic_head = ScriptDirectory.from_config(config).get_current_head()
    assert migrate.head_revision() == alembic_head


def test_an_unmigrated_database_is_refused_with_the_command_that_fixes_it(
    tmp_path: Path,
) -> None:
    from mailout import db
    from mailout.exceptions import SchemaMissing

    engine = db.make_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    assert migrate.current_revision(engine) is None
    with pytest.raises(SchemaMissing, match="mailout db upgrade"):
        migrate.require_schema(engine)
    engine.dispose()


def test_checking_the_schema_does_not_load_alembic(engine: Engine) -> None:
    """A worker checks the schema at every start: that must not cost Alembic's import."""
    import subprocess
    import sys

    url = engine.url.render_as_string(hide_password=False)
    code = ("import sys; from mailout import db; from mailout.db import migrate; "
            f"migrate.require_schema(db.make_engine({url!r})); "
            "print('alembic' in sys.modules, 'mako' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
