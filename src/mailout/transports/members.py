"""The health of a multi-transport's members: which are up, and when one that is down
is probed.

Each member has a breaker (:class:`mailout.support.breaker.Breaker`, the rule the
worker's own breakers follow). A member that answers ``PAUSE`` (a configuration
error: bad credentials, a 401) or ``OUTAGE`` (unreachable) is down for
``down_seconds``; after that one send probes it, and each failed probe doubles the
time, up to ``down_cap``. Sends that were already in flight to it when it went down
fail a moment later and count for nothing: ten sends in flight that meet one 401 are
one down time of the base length, one log line and one alert. Any other answer
(even from a send that was in flight) brings it back.

Each transition (down, back up) is logged once here and reported to the listener,
through which the worker fires an alert and sets the member's metric. A failed probe
is logged (it moves the down time) but is no transition.

Health is this process's view of reaching that provider: the lanes of one worker
share one :class:`Members` (their transports are built one per lane).
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mailout.support.breaker import Breaker, Trip
from mailout.transports.base import Decision, SendResult

log = logging.getLogger(__name__)


class State(enum.StrEnum):
    """Where a member stands, as this process sees it."""

    UP = "up"  # sends go through it
    DOWN = "down"  # skipped (or waited for) until a send probes it


@dataclass(frozen=True, slots=True)
class Change:
    """A member went down, failed a probe or came back: for alerts and metrics."""

    transport: str  # the multi-transport's name: "failover" or "roundrobin"
    member: str  # the member's label: "resend", "smtp#2"
    state: State
    reason: str | None  # why it is down (the failed send's reason); None once back
    seconds: float  # down: until its next probe; back: how long it was down
    transition: bool  # it went down or came back; False: a probe failed, still down
    failed_probes: int = 0  # in this down spell


Listener = Callable[[Change], None]


@dataclass(frozen=True, slots=True)
class Down:
    """Why a member is down, and for how much longer."""

    decision: Decision  # PAUSE or OUTAGE: what the failed send answered
    reason: str  # its reason label ("unauthorized", "connect_failed")
    seconds_left: float  # until a send may probe it (0: now, unless a probe is out)


class Members:
    """The breakers of one multi-transport's members, by label."""

    def __init__(self, name: str, labels: Sequence[str], *, down_seconds: float,
                 down_cap: float, clock: Callable[[], float]) -> None:
        self.name = name
        self._breakers = {label: Breaker(down_seconds, down_cap, clock=clock)
                          for label in labels}
        self._decisions: dict[str, Decision] = {}
        self._tokens = itertools.count(1)
        self.listener: Listener | None = None

    def pace(self, down_seconds: float, down_cap: float) -> None:
        for breaker in self._breakers.values():
            breaker.base, breaker.cap = down_seconds, down_cap

    def token(self) -> int:
        """A number for one send through one member: tells a probe from the others."""
        return next(self._tokens)

    def is_up(self, label: str) -> bool:
        return not self._breakers[label].is_open

    def available(self, label: str) -> bool:
        """Up, or down with its probe due: a send may go through it now."""
        breaker = self._breakers[label]
        return not breaker.is_open or breaker.probe_due

    def admit(self, label: str, token: int) -> bool:
        """May send ``token`` go through ``label`` now (as its probe, if it is down)?"""
        return self._breakers[label].admit(token)

    def seconds_left(self, label: str) -> float:
        return self._breakers[label].seconds_left()

    def down(self, label: str) -> Down | None:
        """Why ``label`` is down; None while it is up."""
        breaker = self._breakers[label]
        if not breaker.is_open:
            return None
        return Down(self._decisions.get(label, Decision.OUTAGE), breaker.reason or "down",
                    breaker.seconds_left())

    def states(self) -> dict[str, State]:
        return {label: State.DOWN if b.is_open else State.UP
                for label, b in self._breakers.items()}

    def failed(self, label: str, result: SendResult, token: int) -> None:
        """Send ``token`` through ``label`` answered PAUSE or OUTAGE."""
        trip = self._breakers[label].fail(result.reason, token)
        if trip is None:
            return  # in flight when it went down: not new evidence
        self._decisions[label] = result.decision
        self._report_down(label, result.reason, trip)

    def answered(self, label: str) -> None:
        """A send through ``label`` got an answer past the connection: it works."""
        breaker = self._breakers[label]
        lasted, probes = breaker.open_for(), breaker.failed_probes
        if not breaker.close():
            return
        log.warning("%s: transport %s is back after %.0fs down (%d failed probes)",
                    self.name, label, lasted, probes,
                    extra={"event": "member_back", "transport": self.name, "member": label,
                           "seconds": lasted, "failed_probes": probes})
        self._tell(Change(self.name, label, State.UP, None, lasted, transition=True,
                          failed_probes=probes))

    def abandoned(self, label: str, token: int) -> None:
        """Send ``token`` ended without an answer (cancelled): the next may probe."""
        self._breakers[label].probe_inconclusive(token)

    def _report_down(self, label: str, reason: str, trip: Trip) -> None:
        probes = self._breakers[label].failed_probes
        if trip.opened:
            log.warning("%s: transport %s is down for %.0fs (%s)", self.name, label,
                        trip.seconds, reason,
                        extra={"event": "member_down", "transport": self.name,
                               "member": label, "seconds": trip.seconds, "reason": reason})
        else:
            log.warning("%s: transport %s is still down: probe failed (%s); down for %.0fs",
                        self.name, label, reason, trip.seconds,
                        extra={"event": "member_probe_failed", "transport": self.name,
                               "member": label, "seconds": trip.seconds, "reason": reason,
                               "failed_probes": probes})
        self._tell(Change(self.name, label, State.DOWN, reason, trip.seconds,
                          transition=trip.opened, failed_probes=probes))

    def _tell(self, change: Change) -> None:
        if self.listener is not None:
            self.listener(change)
