"""Webhook receivers: provider event callbacks in, provider-neutral events out.

Owns the receiver contract (``base``: verify a request, parse it into
:class:`mailout.models.Event` records), one receiver module per provider, named after
it and listed in ``settings.RECEIVERS`` (each builds its receiver with
``from_settings``), their settings (``settings``), the framework-neutral request
handler (``handler``), the ASGI app
(``app``, Starlette: mountable in FastAPI or Starlette, served by
``mailout webhooks serve``). The Django view is :mod:`mailout.contrib.django.webhooks`
(``django`` here only re-exports it, for the import path documented before).

May import: ``mailout.feedback``, ``mailout.delivery.policy``, ``mailout.db``,
``mailout.message``, ``mailout.support``, ``mailout.models``, ``mailout.exceptions``.
Never imports the worker, the transports, the metrics or an entry point
(tests/unit/test_layering.py).
"""
