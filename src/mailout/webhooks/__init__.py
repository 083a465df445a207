"""Webhook receivers: provider event callbacks in, provider-neutral events out.

Owns the receiver contract (``base``: verify a request, parse it into
:class:`mailout.events.Event` records), one receiver per provider (``resend``,
``postmark``, ``ses``, ``sendgrid``, ``mailgun``, ``brevo``), their settings
(``settings``), the framework-neutral request handler (``handler``), the ASGI app
(``app``, Starlette: mountable in FastAPI or Starlette, served by
``mailout webhooks serve``) and a Django view (``django``, importable without Django
installed until it is called).

May import: ``mailout.events``, ``mailout.ingest``, ``mailout.db``, ``mailout.alerts``,
``mailout.exceptions``, ``mailout.policy``. Never imports the worker, the transports
or the CLI.
"""
