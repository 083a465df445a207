"""Feedback: what providers and mail servers report back after a send.

Owns delivery events in provider-neutral form (``events``), RFC 3464 DSN and RFC 5965
ARF reports read into events (``dsn``), storing events once, linking them to outbox
rows and suppressing addresses (``ingest``) and the bounce and complaint rate alert
(``rate_alert``).

May import: ``mailout.db``, ``mailout.message``, ``mailout.support``,
``mailout.models``, ``mailout.exceptions``. Never imports the transports' senders,
the worker, the webhooks' HTTP side or an entry point (tests/unit/test_layering.py).
"""
