"""How one worker process runs: the options :mod:`mailout.worker.build` derives from settings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Options:
    """How one worker runs; see :mod:`mailout.config` for the matching settings."""

    lease_seconds: float = 120.0
    poll_seconds: float = 1.0
    pause_seconds: float = 30.0
    pause_cap: float = 600.0
    shutdown_grace: float = 30.0
    until_idle: bool = False
    listen: bool = True  # LISTEN for NOTIFY on PostgreSQL; off for PgBouncer (poll only)
