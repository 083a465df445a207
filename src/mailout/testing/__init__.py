"""Test helpers for applications that send mail through mailout.

``Outbox`` (in ``outbox``) reads what a test enqueued (``assert_enqueued``) and
delivers it with an in-process worker over the memory transport (``deliver_all``),
returning the rendered messages. Fixtures: ``pytest_plugins = ["mailout.testing.plugin"]``
(an ``outbox`` over a migrated SQLite file, or over your ``mailout_database_url``), or
``["mailout.testing.django"]`` for a Django project (pytest-django).

May import any of mailout (the worker, the memory transport, ``mailout.db``,
``mailout.config``, ``mailout.contrib.django`` for the Django flavour) and pytest;
nothing of mailout's own imports this package.
"""

from __future__ import annotations

from mailout.testing.outbox import Outbox, QueuedMessage

__all__ = ["Outbox", "QueuedMessage"]
