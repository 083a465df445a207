"""The worker runtime: claim, attempt, complete, heartbeat, and the processes around it.

``runtime`` runs a worker process's lanes, heartbeat and shutdown; ``lane`` is one
lane's claim-and-send loop; ``completions`` batches completion writes; ``breaker``
stops sending while the transport is misconfigured or down; ``ratelimit`` paces a
queue; ``build`` assembles a worker from settings; ``supervisor`` runs several
worker processes.

May import: the flat domain modules (``attempt``, ``guards``, ``render``, ``policy``,
``alerts``, ``logs``, ``config``...), ``mailout.db``, ``mailout.transports`` and
``mailout.metrics``. Never imports the CLI.
"""
