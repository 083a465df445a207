"""What a running worker reports about itself: the hook for metrics and health.

The worker calls an :class:`Observer` at each event; :mod:`mailout.metrics.prometheus`
implements one for Prometheus. Observers must be fast and must not raise: they run
on the worker's event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sqlalchemy import Engine

from mailout.delivery.policy import Lane
from mailout.models import ClaimedMessage, Completion
from mailout.support.alerts import Alerts


class Observer(Protocol):
    def attempt(self, msg: ClaimedMessage, completion: Completion, seconds: float) -> None:
        """An attempt ended (``seconds``: claim to outcome, on this process's clock)."""

    def reclaimed(self, msg: ClaimedMessage) -> None:
        """A row was claimed after another worker's lease ran out."""

    def paused(self, reason: str | None) -> None:
        """The transport was paused for ``reason``, or resumed (None)."""

    def outage(self, reason: str | None) -> None:
        """A transport outage started for ``reason``, or ended (None)."""

    def member(self, transport: str, member: str, state: str, reason: str | None) -> None:
        """A failover member's state (``up``, ``down``), and why it is down."""

    def tick(self) -> None:
        """A lane loop went round: the worker is alive."""

    def database(self, reachable: bool) -> None:
        """A database call succeeded, or failed for want of a database."""


class NullObserver:
    """Observes nothing."""

    def attempt(self, msg: ClaimedMessage, completion: Completion, seconds: float) -> None:
        return None

    def reclaimed(self, msg: ClaimedMessage) -> None:
        return None

    def paused(self, reason: str | None) -> None:
        return None

    def outage(self, reason: str | None) -> None:
        return None

    def member(self, transport: str, member: str, state: str, reason: str | None) -> None:
        return None

    def tick(self) -> None:
        return None

    def database(self, reachable: bool) -> None:
        return None


class WorkerView(Protocol):
    """What metrics and health need of a running worker, and nothing more.

    :class:`mailout.worker.runtime.Worker` provides it; this package never imports the
    worker package (the worker reports to the observer, not the other way round).
    """

    name: str
    engine: Engine
    alerts: Alerts
    observer: Observer

    @property
    def stopping(self) -> bool: ...

    @property
    def poll_seconds(self) -> float: ...

    @property
    def db_retry_cap(self) -> float:
        """The longest wait between database retries: health allows for it."""
        ...

    @property
    def lane_specs(self) -> Sequence[Lane]: ...


class Observers:
    """Several observers, each told of every event in turn (Prometheus and OpenTelemetry)."""

    def __init__(self, *members: Observer) -> None:
        self.members = members

    def attempt(self, msg: ClaimedMessage, completion: Completion, seconds: float) -> None:
        for member in self.members:
            member.attempt(msg, completion, seconds)

    def reclaimed(self, msg: ClaimedMessage) -> None:
        for member in self.members:
            member.reclaimed(msg)

    def paused(self, reason: str | None) -> None:
        for member in self.members:
            member.paused(reason)

    def outage(self, reason: str | None) -> None:
        for member in self.members:
            member.outage(reason)

    def member(self, transport: str, member: str, state: str, reason: str | None) -> None:
        for each in self.members:
            each.member(transport, member, state, reason)

    def tick(self) -> None:
        for member in self.members:
            member.tick()

    def database(self, reachable: bool) -> None:
        for member in self.members:
            member.database(reachable)


def members(observer: Observer) -> tuple[Observer, ...]:
    """The observers ``observer`` stands for: its members, or itself."""
    return observer.members if isinstance(observer, Observers) else (observer,)
