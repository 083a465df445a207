"""Feedback: what providers and mail servers report back after a send.

Owns the helpers that build delivery events in provider-neutral form (``events``;
the :class:`~mailout.models.Event` records themselves are in ``mailout.models``,
since the database stores them), RFC 3464 DSN and RFC 5965 ARF reports read into
events (``dsn``), the bounce classification table (``bounce_rules``: hard or
soft, and why), storing events once, linking them to outbox rows and suppressing
addresses (``ingest``) and the bounce and complaint rate alert (``rate_alert``; its
limits come from whoever runs it, today the webhook receivers' settings).

May import: ``mailout.db``, ``mailout.message``, ``mailout.support``,
``mailout.models``, ``mailout.exceptions``. Never imports the transports' senders,
the worker, the webhooks' HTTP side or an entry point (tests/unit/test_layering.py).
"""
