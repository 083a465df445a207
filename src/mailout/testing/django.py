"""The old home of the Django test fixtures, kept because it was documented:
``pytest_plugins = ["mailout.testing.django"]`` still works.

The fixtures live in :mod:`mailout.contrib.django.testing`, with the rest of
mailout's Django glue; new projects name that module. This one only re-exports it.
"""

from __future__ import annotations

from mailout.contrib.django.testing import DjangoOutbox, mailout_templates, outbox

__all__ = ["DjangoOutbox", "mailout_templates", "outbox"]
