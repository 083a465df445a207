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

import importlib

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL, make_url

from mailout.db.stores.base import Store

# Each store's module, imported when a first connection asks for it: an application
# on one database loads that store's SQL only.
_MODULES = {"postgresql": ("mailout.db.stores.postgresql", "PostgreSQLStore"),
            "mysql": ("mailout.db.stores.mysql", "MySQLStore"),
            "sqlite": ("mailout.db.stores.sqlite", "SQLiteStore")}
_STORES: dict[str, Store] = {}


def store_for(bind: Engine | Connection | URL | str) -> Store:
    """The store of ``bind``'s database (a URL's backend: ``postgresql+psycopg://``
    is PostgreSQL's). ValueError for a database mailout has no store for."""
    if isinstance(bind, Engine | Connection):
        name = bind.dialect.name
    else:
        name = (make_url(bind) if isinstance(bind, str) else bind).get_backend_name()
    store = _STORES.get(name)
    if store is None:
        # SQLAlchemy's "mariadb://" is its mysql dialect under another name.
        key, name = name, "mysql" if name == "mariadb" else name
        if name not in _MODULES:
            raise ValueError(f"mailout has no store for {name!r} databases")
        module, cls = _MODULES[name]
        store = _STORES.get(name) or getattr(importlib.import_module(module), cls)()
        _STORES[key] = _STORES[name] = store
    return store


__all__ = ["Store", "store_for"]
