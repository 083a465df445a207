"""One store per database behind one protocol (:class:`~mailout.db.stores.base.Store`):
``postgresql``, ``mysql`` and ``sqlite``. The completion rules are data in
``completing``, generated into each store's statement; ``claiming`` and ``inserting``
hold what the stores' claims and inserts share, ``common`` the methods alike in all.

:func:`store_for` picks the store of an engine, a connection or a database URL.

May import the rest of :mod:`mailout.db` below its entry points (``schema``,
``claimed``, ``hot_statements``, ``dialects``), ``mailout.models`` and
``mailout.support``. Never imports ``leasing``, ``outcomes`` or ``inserts``: they
import it.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL, make_url

from mailout.db.stores.base import Store
from mailout.db.stores.mysql import MySQLStore
from mailout.db.stores.postgresql import PostgreSQLStore
from mailout.db.stores.sqlite import SQLiteStore

_STORES: dict[str, Store] = {s.name: s for s in (PostgreSQLStore(), MySQLStore(),
                                                  SQLiteStore())}


def store_for(bind: Engine | Connection | URL | str) -> Store:
    """The store of ``bind``'s database (a URL's backend: ``postgresql+psycopg://``
    is PostgreSQL's). ValueError for a database mailout has no store for."""
    if isinstance(bind, Engine | Connection):
        name = bind.dialect.name
    else:
        name = (make_url(bind) if isinstance(bind, str) else bind).get_backend_name()
    try:
        return _STORES[name]
    except KeyError:
        raise ValueError(f"mailout has no store for {name!r} databases") from None


__all__ = ["Store", "store_for"]
