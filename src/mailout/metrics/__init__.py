"""Observability: the observer hook the worker calls, Prometheus metrics and the
health server, and the collectors that read queue depth at scrape time.

May import: ``mailout.delivery.policy``, ``mailout.db``, ``mailout.support``,
``mailout.models``, ``mailout.exceptions``. The worker hands itself to the
collectors as a small protocol; this package never imports ``mailout.worker`` (the
same layer, imported the other way) nor the transports (tests/unit/test_layering.py).
"""
