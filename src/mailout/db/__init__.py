"""The database boundary: every SQL statement mailout runs lives in this package.

Owns the schema (``schema``), engines (``engine``), migrations (``migrate`` and
``migrations/``), the enqueue INSERT (``inserts``), the worker's claims and leases
(``leasing``; the rows a claim reads back are decoded in ``claimed``), its finished
attempts (``outcomes``; MySQL's batch completions in ``json_table``), operator
switches (``pauses``), operator reads and changes (``admin``), reports and gauges
(``stats``), delivery events, suppressions and webhook nonces (``events``) and
PostgreSQL LISTEN (``notifications``).
Dialect differences are answered by the capability functions in ``dialects``; no
caller outside this package asks which database it is talking to.

May import: ``mailout.models``, ``mailout.exceptions``, ``mailout.timeutil``,
``mailout.events`` (plain event records).
Never imports the worker, the transports, the CLI or the metrics packages.

The engine helpers are re-exported here (``db.make_engine``). The migration helpers
are imported from ``mailout.db.migrate`` where needed, so the enqueue path never
imports Alembic.
"""

from __future__ import annotations

from mailout.db.engine import (
    DEFAULT_URL,
    HeldConnection,
    database_url,
    immediate,
    immediate_options,
    immediate_retrying,
    make_engine,
)

__all__ = ["DEFAULT_URL", "HeldConnection", "database_url", "immediate", "immediate_options",
           "immediate_retrying", "make_engine"]
