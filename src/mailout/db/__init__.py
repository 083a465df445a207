"""The database boundary: every SQL statement mailout runs lives in this package.

Owns the schema (``schema``), engines (``engine``), migrations (``migrate`` and
``migrations/``), the enqueue INSERT (``inserts``), the worker's claims, completions
and leases (``leasing``), operator switches (``pauses``), operator reads and changes
(``admin``), reports and gauges (``stats``) and PostgreSQL LISTEN (``notifications``).
Dialect differences are answered by the capability functions in ``dialects``; no
caller outside this package asks which database it is talking to.

May import: ``mailout.models``, ``mailout.exceptions``, ``mailout.timeutil``.
Never imports the worker, the transports, the CLI or the metrics packages.

The engine helpers are re-exported here (``db.make_engine``); the migration helpers
are loaded on first use, so the enqueue path never imports Alembic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mailout.db.engine import DEFAULT_URL, database_url, immediate, make_engine

if TYPE_CHECKING:
    from mailout.db.migrate import (
        VERSION_TABLE,
        current_revision,
        head_revision,
        migration_sql,
        require_schema,
        upgrade,
    )

_MIGRATE = ("VERSION_TABLE", "upgrade", "migration_sql", "head_revision", "current_revision",
            "require_schema")

__all__ = [
    "DEFAULT_URL",
    "VERSION_TABLE",
    "current_revision",
    "database_url",
    "head_revision",
    "immediate",
    "make_engine",
    "migration_sql",
    "require_schema",
    "upgrade",
]


def __getattr__(name: str) -> Any:
    if name in _MIGRATE:
        return getattr(importlib.import_module("mailout.db.migrate"), name)
    raise AttributeError(f"module 'mailout.db' has no attribute {name!r}")
