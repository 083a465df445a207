"""How one worker process runs: the options :mod:`mailout.worker.build` derives from settings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Options:
    """How one worker runs; see :mod:`mailout.worker.config` for the matching settings."""

    lease_seconds: float = 120.0
    poll_seconds: float = 1.0
    pause_seconds: float = 30.0
    pause_cap: float = 600.0
    outage_seconds: float = 5.0  # MAILOUT_OUTAGE_PROBE_SECONDS
    outage_cap: float = 300.0  # MAILOUT_OUTAGE_PROBE_CAP_SECONDS
    outage_alert_seconds: float = 600.0  # MAILOUT_OUTAGE_ALERT_SECONDS
    shutdown_grace: float = 30.0
    until_idle: bool = False
    listen: bool = True  # LISTEN for NOTIFY on PostgreSQL (behind PgBouncer: MAILOUT_LISTEN_URL)
