"""Running behind a connection pooler (PgBouncer): the settings that say so, and
what they change in the connections mailout makes.

In transaction mode PgBouncer hands each transaction whichever server connection is
free, so nothing may outlive a transaction on the server side:

- psycopg 3 prepares a statement once it has run a few times and names it
  (``_pg3_0``...) on that server connection; the next transaction may land on another
  one, where the name does not exist. ``prepare_threshold=None`` turns that off.
- LISTEN needs a session: a notification arrives on the server connection that ran
  LISTEN, which PgBouncer gives to other clients between transactions. So the LISTEN
  connection goes straight to PostgreSQL (``MAILOUT_LISTEN_URL``), or the worker polls.
- Statement timeouts are ``SET LOCAL`` (:func:`mailout.db.dialects.limit_statement_time`).

Statement mode (autocommit only) cannot run mailout's multi-statement transactions
and is refused; session mode needs nothing and is what leaving the setting unset means.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import make_url

from mailout.exceptions import ConfigError

SETTING = "MAILOUT_PGBOUNCER"
LISTEN_SETTING = "MAILOUT_LISTEN_URL"


class PoolMode(enum.Enum):
    """How the database connections reach PostgreSQL."""

    DIRECT = "direct"  # straight to PostgreSQL, or a session-mode pooler: sessions hold
    TRANSACTION = "transaction"  # PgBouncer pool_mode=transaction: nothing outlives a transaction


def pool_mode(env: Mapping[str, str] | None = None) -> PoolMode:
    """``MAILOUT_PGBOUNCER``: unset, empty or ``session`` -> DIRECT; ``transaction`` ->
    TRANSACTION; anything else (``statement`` included) is a :class:`ConfigError`."""
    raw = (os.environ if env is None else env).get(SETTING, "").strip().lower()
    if raw in ("", "session", "off", "none"):
        return PoolMode.DIRECT
    if raw == "transaction":
        return PoolMode.TRANSACTION
    if raw == "statement":
        raise ConfigError(SETTING, "statement mode cannot run mailout's transactions (each "
                          "claim and completion is several statements); use PgBouncer's "
                          "pool_mode=transaction and MAILOUT_PGBOUNCER=transaction")
    raise ConfigError(SETTING, f"expected transaction or session, got {raw[:40]!r}")


def connect_args(url: object, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The driver arguments an engine to ``url`` needs under the pool mode: psycopg's
    ``prepare_threshold=None`` behind a transaction-mode PgBouncer, else nothing."""
    if pool_mode(env) is not PoolMode.TRANSACTION:
        return {}
    if make_url(str(url) if not isinstance(url, str) else url).get_backend_name() != "postgresql":
        return {}
    return {"prepare_threshold": None}


def engine_kwargs(url: object, kw: dict[str, Any],
                  env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``kw`` with :func:`connect_args` merged into its ``connect_args`` (the caller's
    own values win)."""
    extra = connect_args(url, env)
    if not extra:
        return kw
    merged = dict(kw)
    merged["connect_args"] = {**extra, **kw.get("connect_args", {})}
    return merged


def listen_url(database_url: str, env: Mapping[str, str] | None = None) -> str | None:
    """The URL the worker's LISTEN connection uses: ``MAILOUT_LISTEN_URL`` when set;
    else the database URL, except behind a transaction-mode pooler, where there is
    none (None: the worker polls)."""
    source = os.environ if env is None else env
    explicit = source.get(LISTEN_SETTING, "").strip()
    if explicit:
        if make_url(explicit).get_backend_name() != "postgresql":
            raise ConfigError(LISTEN_SETTING, "LISTEN is PostgreSQL's; expected a "
                              "postgresql:// URL straight to the server")
        return explicit
    if pool_mode(env) is PoolMode.TRANSACTION:
        return None
    return database_url
