"""mailout for Django: ``INSTALLED_APPS += ["mailout.contrib.django"]``.

Owns the email backend (``EMAIL_BACKEND = "mailout.contrib.django.EmailBackend"``),
which writes outbox rows on Django's own connection inside the caller's
``transaction.atomic()``; :func:`enqueue` for the same from application code; the
Django migrations that create mailout's tables (the same as ``mailout db upgrade``);
the system checks comparing the two schemas; the ``manage.py mailout`` command, with
the worker's mail settings taken from Django's (``mail_settings``); the admin pages
for messages; the webhook receivers as a Django view (``webhooks``); the
pytest fixtures for Django projects (``testing``).

May import: Django, ``mailout.db`` (borrowed connections, schema, operator actions),
``mailout.outbox`` (enqueue), ``mailout.webhooks`` (the handler the view runs),
``mailout.testing`` (the fixtures' ``Outbox``), ``mailout.cli`` (the management
command runs its commands), ``mailout.message.addresses`` (``DEFAULT_FROM_EMAIL`` is
checked as the worker checks ``MAIL_FROM``), ``mailout.transports.smtp.settings`` (the
TLS modes Django's SMTP settings map to), ``mailout.models`` and ``mailout.exceptions``. Nothing of
mailout's core imports this package. Names are imported on first use, so that
Django can import the app before its settings are ready.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mailout.contrib.django.backend import EmailBackend
    from mailout.contrib.django.connection import borrowed_connection, enqueue

_WHERE = {
    "EmailBackend": "mailout.contrib.django.backend",
    "borrowed_connection": "mailout.contrib.django.connection",
    "enqueue": "mailout.contrib.django.connection",
}
__all__ = ["EmailBackend", "borrowed_connection", "enqueue"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
