"""Delivery: what happens to one claimed message, decided without the worker's loops.

Owns one attempt (``attempt``: guards, render, send, and the row's next state), the
retry and queue policy, lanes and the duration grammar (``policy``), the send-time
checks, resolvers, suppression, redirect and allow-list (``guards``) and the decision
after an unknown outcome: resend inside the transport's key window, else
``MAILOUT_ON_UNKNOWN`` (``after_unknown``).

May import: ``mailout.db``, ``mailout.transports``, ``mailout.message``,
``mailout.support``, ``mailout.models``, ``mailout.exceptions``. Never imports the
worker, the metrics, the webhooks, enqueue or an entry point (tests/unit/test_layering.py).
"""
