"""The worker runtime: claim, attempt, complete, heartbeat, and the processes around it.

``runtime`` runs a worker process's lanes, heartbeat and shutdown; ``lane`` is one
lane's claim-and-send loop; ``completions`` batches completion writes; ``breaker``
stops sending while the transport is misconfigured or down; ``ratelimit`` paces a
queue; ``config`` reads the worker's settings from the environment; ``build``
assembles a worker from them; ``supervisor`` runs several worker processes.

May import: ``mailout.metrics`` (the same layer), ``mailout.delivery``,
``mailout.feedback``, ``mailout.db``, ``mailout.transports``, ``mailout.message``,
``mailout.support``, ``mailout.models`` and ``mailout.exceptions``. Never imports the
webhooks, enqueue or an entry point (tests/unit/test_layering.py).
"""
