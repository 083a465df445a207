"""mailout's schema on a Django database: migrate it, and compare it with the models.

:func:`upgrade_to` runs mailout's own Alembic migrations on Django's connection,
inside the transaction of Django's ``migrate`` (so the tables are exactly those of
``mailout db upgrade``). :func:`model_differences` compares the unmanaged models
with ``mailout.db.schema``; :func:`revision_problem` says whether a database is at
the revision this mailout needs. The system checks in ``checks`` report both.
"""

from __future__ import annotations

from typing import Any

from mailout.contrib.django.connection import SUPPORTED_VENDORS, borrowed_connection
from mailout.db import migrate
from mailout.db.schema import metadata


def keeps_tables_on(using: str) -> bool:
    """Can mailout keep its tables on Django's database ``using``? Not on a database
    it has no store for (MySQL for now): ``migrate`` then leaves that database alone,
    so a project with such a second database still migrates, and the backend refuses
    to write there by name."""
    from django.db import connections

    return bool(connections[using].vendor in SUPPORTED_VENDORS)


def upgrade_to(using: str, revision: str) -> None:
    """Apply mailout's migrations up to ``revision`` on Django's database ``using``."""
    if not keeps_tables_on(using):
        return
    with borrowed_connection(using) as conn:
        migrate.upgrade_connection(conn, revision)


def downgrade_to(using: str, revision: str) -> None:
    """Undo mailout's migrations down to ``revision`` (``"base"``: drop every table)."""
    from alembic import command

    if not keeps_tables_on(using):
        return
    with borrowed_connection(using) as conn:
        cfg = migrate._alembic_config(conn.engine.url.render_as_string())
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def model_differences(models: list[Any]) -> list[str]:
    """How the unmanaged ``models`` disagree with mailout's tables; [] when they agree.

    Each field's column must exist in its table with the same nullability.
    """
    problems: list[str] = []
    for model in models:
        table = metadata.tables.get(model._meta.db_table)
        if table is None:
            problems.append(f"{model.__name__}: mailout has no table {model._meta.db_table!r}")
            continue
        for field in model._meta.concrete_fields:
            column = table.columns.get(field.column)
            if column is None:
                problems.append(f"{model.__name__}.{field.name}: no column {field.column!r} "
                                f"in {table.name}")
            elif not column.primary_key and bool(field.null) != bool(column.nullable):
                problems.append(f"{model.__name__}.{field.name}: null={field.null} but "
                                f"{table.name}.{column.name} is "
                                f"{'' if column.nullable else 'NOT '}NULL")
    return problems


def revision_problem(using: str) -> str | None:
    """Why the database ``using`` cannot serve this mailout, or None when it can."""
    with borrowed_connection(using) as conn:
        current = migrate.current_revision_on(conn)
    head = migrate.head_revision()
    if current == head:
        return None
    found = "no mailout tables" if current is None else f"mailout revision {current}"
    return f"database {using!r} has {found}; this mailout needs revision {head}"
