"""The database boundary: every SQL statement mailout runs lives in this package.

Owns the schema (``schema``), engines (``engine``), migrations (``migrate`` and
``migrations/``), one store per database behind one protocol (``stores``: the claim,
the completion of finished attempts, the INSERT of new rows, lease upkeep), and their
entry points: the enqueue INSERT (``inserts``), the worker's claims and leases
(``leasing``; the rows a claim reads back are decoded in ``claimed``), its finished
attempts (``outcomes``; the completion rules are data in ``stores.completing``), hot
statements on the driver's cursor (``hot_statements``), operator switches
(``pauses``), operator reads and changes (``operator``), reports and gauges
(``stats``), one module per feedback table: delivery events (``delivery_events``),
the suppression list (``suppressions``) and webhook replay nonces
(``webhook_nonces``), and PostgreSQL LISTEN (``notifications``).
Dialect differences are each store's SQL, and inside this package the capability
functions in ``dialects``; no caller outside this package asks which database it is
talking to (it asks ``stores.store_for(bind)``).

May import: ``mailout.message``, ``mailout.support``, ``mailout.models``,
``mailout.exceptions``. Never imports the transports (the same layer), nor delivery,
feedback or anything above them (tests/unit/test_layering.py).

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
