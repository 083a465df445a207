"""The old home of the Django webhook view, kept because it was documented:
``from mailout.webhooks.django import webhook_view`` still works.

The view lives in :mod:`mailout.contrib.django.webhooks`, with the rest of mailout's
Django glue; new code imports it from there. This module only re-exports it, and is
the one place outside ``contrib`` allowed to import ``contrib`` (tests/unit/test_layering.py).
"""

from __future__ import annotations

from mailout.contrib.django.webhooks import webhook_view

__all__ = ["webhook_view"]
