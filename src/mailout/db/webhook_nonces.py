"""SQL for webhook replay nonces (``mailout_webhook_nonces``).

Every function takes a SQLAlchemy ``Connection`` and runs inside the caller's
transaction. A nonce is recorded with the dialect's insert-or-ignore, so of two
concurrent copies of one signed delivery exactly one records it: the other waits
for the first's commit, inserts nothing and is the replay.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Float, and_, bindparam, delete

from mailout.db import dialects
from mailout.db.schema import db_now, db_now_plus, webhook_nonces


def _ago(seconds: float) -> Any:
    return db_now_plus(bindparam("ago", -float(seconds), Float))


def claim_nonce(conn: Connection, provider: str, nonce: str) -> bool:
    """Record a signed delivery's nonce; False when it was already recorded (a replay)."""
    return dialects.insert_new_row(conn, webhook_nonces, ("provider", "nonce"), {
        "provider": provider, "nonce": nonce[:255], "seen_at": db_now()}) is not None


def prune_nonces(conn: Connection, older_than_seconds: float) -> int:
    """Forget nonces older than the signature tolerance: their timestamps are refused
    as stale anyway."""
    stmt = delete(webhook_nonces).where(
        and_(webhook_nonces.c.seen_at < _ago(older_than_seconds)))
    return int(conn.execute(stmt).rowcount or 0)
