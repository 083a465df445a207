"""The one Django internal mailout.contrib.django relies on: a view's
``_non_atomic_requests``, the attribute ``transaction.non_atomic_requests`` sets and
``BaseHandler.make_view_atomic`` reads. The admin's changelist sets it to the outbox
database read per request (admin._OutboxDatabase), since the decorator takes a fixed
alias. A Django that stopped reading it would wrap the changelist's actions in the
outbox database's ATOMIC_REQUESTS transaction again; this fails first, by name."""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import pytest
from django.core.handlers import base

from mailout.contrib.django.admin import MessageAdmin


def test_make_view_atomic_honours_the_changelists_non_atomic_requests(
        settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    wrapped: list[str | None] = []

    def atomic(using: str | None = None, **_: Any) -> Callable[[Any], Any]:
        wrapped.append(using)  # which database's transaction the view would run in
        return lambda view: view

    monkeypatch.setattr(base.transaction, "atomic", atomic)
    for outbox, other in (("postgres", "default"), ("default", "postgres")):
        settings.MAILOUT_DATABASE = outbox
        wrapped.clear()
        base.BaseHandler().make_view_atomic(MessageAdmin.changelist_view)
        assert outbox not in wrapped, (
            f"Django {version('django')} no longer honours a view's _non_atomic_requests "
            "(BaseHandler.make_view_atomic): mailout/contrib/django/admin.py relies on it")
        assert other in wrapped  # the other ATOMIC_REQUESTS database still wraps it
