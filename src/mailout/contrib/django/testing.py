"""pytest fixtures for Django projects (pytest-django):
``pytest_plugins = ["mailout.contrib.django.testing"]``.

The backend keeps writing real rows in tests. Django's test set-up swaps
``EMAIL_BACKEND`` for its in-memory one, so the ``outbox`` fixture puts mailout's
back for the test, and reads rows through Django's own connection: rows written in
a test's transaction (``@pytest.mark.django_db``) are seen. ``outbox.deliver_all()``
runs a worker with a connection of its own, which sees committed rows only: mark
such tests ``@pytest.mark.django_db(transaction=True)``, on a database a second
connection can reach (SQLite needs a file ``TEST`` ``NAME``, not the in-memory default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mailout.testing.outbox import Outbox

BACKEND = "mailout.contrib.django.EmailBackend"


class DjangoOutbox(Outbox):
    """An :class:`Outbox` on Django's database ``using``."""

    def __init__(self, using: str, **kwargs: Any) -> None:
        from mailout.contrib.django.connection import borrowed_connection

        super().__init__(lambda: borrowed_connection(using), None, **kwargs)
        self.using = using

    def _worker_database_url(self) -> str:
        # Called in the caller's context: Django's connections are per thread and per
        # asyncio context, and the test's transaction is on the caller's.
        from django.db import connections

        from mailout.contrib.django.connection import database_url

        if connections[self.using].in_atomic_block:
            raise RuntimeError("deliver_all() needs committed rows, and this test runs in a "
                               "transaction: mark it @pytest.mark.django_db(transaction=True)")
        return database_url(self.using)


@pytest.fixture
def mailout_templates() -> Path | None:
    """The templates folder the worker renders with; None: messages with content only."""
    return None


@pytest.fixture
def outbox(settings: Any, mailout_templates: Path | None,
           monkeypatch: pytest.MonkeyPatch) -> DjangoOutbox:
    settings.EMAIL_BACKEND = BACKEND
    if mailout_templates is not None:
        # Enqueue checks templates in the folder the worker renders from.
        monkeypatch.setenv("MAILOUT_TEMPLATES", str(mailout_templates))
    using = str(getattr(settings, "MAILOUT_DATABASE", "default"))
    return DjangoOutbox(using, templates_dir=mailout_templates)
