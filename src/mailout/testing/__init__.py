"""Test helpers for applications that send mail through mailout.

``Outbox`` (in ``outbox``) reads what a test enqueued (``assert_enqueued``) and
delivers it with an in-process worker over the memory transport (``deliver_all``),
returning the rendered messages. Fixtures: ``pytest_plugins = ["mailout.testing.plugin"]``
(an ``outbox`` over a migrated SQLite file, or over your ``mailout_database_url``), or
``["mailout.contrib.django.testing"]`` for a Django project (pytest-django; ``django``
here only re-exports it, for the import path documented before).

May import any of mailout (the worker, the memory transport, ``mailout.db``,
``mailout.worker.config``) and pytest; nothing of mailout's own imports this package.
"""

from __future__ import annotations

from mailout.testing.outbox import Outbox, QueuedMessage

__all__ = ["Outbox", "QueuedMessage"]
