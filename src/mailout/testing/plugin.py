"""pytest fixtures: ``pytest_plugins = ["mailout.testing.plugin"]`` in your conftest.py.

``outbox`` is an :class:`~mailout.testing.Outbox` over ``mailout_database_url``: by
default a fresh, migrated SQLite file per test. Override ``mailout_database_url`` to
use your own test database (it must be migrated: ``mailout.db.migrate.upgrade``), and
``mailout_templates`` to point at your templates (for the test, ``MAILOUT_TEMPLATES``
is set to it, so that enqueue checks templates there as the worker renders them).

Enqueue with an engine of ``outbox.database_url`` (or your application's session),
commit, then ``outbox.assert_enqueued(...)`` and ``outbox.deliver_all()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mailout import db
from mailout.db import migrate
from mailout.testing.outbox import Outbox


@pytest.fixture
def mailout_database_url(tmp_path: Path) -> str:
    """A migrated SQLite database for this test."""
    url = f"sqlite:///{tmp_path / 'mailout-outbox.db'}"
    engine = db.make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


@pytest.fixture
def mailout_templates() -> Path | None:
    """The templates folder the worker renders with; None: messages with content only."""
    return None


@pytest.fixture
def outbox(mailout_database_url: str, mailout_templates: Path | None,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Outbox]:
    if mailout_templates is not None:
        # Enqueue checks templates in the folder the worker renders from.
        monkeypatch.setenv("MAILOUT_TEMPLATES", str(mailout_templates))
    engine = db.make_engine(mailout_database_url)
    yield Outbox(engine.connect, mailout_database_url, templates_dir=mailout_templates)
    engine.dispose()
