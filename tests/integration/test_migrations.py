"""The migrations create exactly the tables that schema.py describes."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, bindparam, inspect, text

from mailout.db import migrate
from mailout.db.schema import metadata


def test_migrated_database_matches_the_table_definitions(engine: Engine) -> None:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={
            "compare_type": True,
            "version_table": migrate.VERSION_TABLE,
            # Only our tables: the version table is Alembic's, not part of the schema.
            # Alembic cannot compare expression indexes (priority DESC): those two are
            # checked by test_claim_indexes_are_in_claim_order instead.
            "include_object": lambda _obj, name, kind, _reflected, _other: (
                name in metadata.tables if kind == "table" else name not in ORDERED
            ),
        })
        diff = compare_metadata(ctx, metadata)
    assert diff == []


ORDERED = ("ix_mailout_messages_due", "ix_mailout_messages_pending_order")


def test_claim_indexes_are_in_claim_order(engine: Engine) -> None:
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
    assert {"ix_mailout_messages_due", "ix_mailout_messages_leased",
            "ux_mailout_messages_key", "ux_mailout_messages_message_id"} <= names


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
