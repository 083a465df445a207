"""Observability: the observer hook the worker calls, Prometheus metrics and the
health server, and the collectors that read queue depth at scrape time.

May import: ``mailout.models``, ``mailout.exceptions``, ``mailout.db``. The worker
hands itself to the collectors as a small protocol; this package never imports
``mailout.worker``.
"""
