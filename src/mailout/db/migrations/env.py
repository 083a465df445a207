"""Alembic environment for mailout's own migrations.

mailout keeps its revision in ``mailout_alembic_version`` so that it never collides
with the application's own Alembic history in the same database.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import Connection, create_engine

from mailout.db import pooler
from mailout.db.schema import metadata

VERSION_TABLE = "mailout_alembic_version"


def _configure(**kw: Any) -> None:
    context.configure(
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        render_as_batch=True,  # SQLite can only alter tables by copying them
        **kw,
    )


def run_offline() -> None:
    _configure(url=context.config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection: Connection | None = context.config.attributes.get("connection")
    if connection is not None:
        _configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = context.config.get_main_option("sqlalchemy.url") or ""
    engine = create_engine(url, **pooler.engine_kwargs(url, {}))
    with engine.connect() as conn:
        _configure(connection=conn)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
