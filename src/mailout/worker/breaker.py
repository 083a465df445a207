"""The worker's transport breakers: stop claiming while the transport cannot work.

Two breakers (:class:`mailout.support.breaker.Breaker`, the rule every breaker in
mailout follows), with the same mechanics and different meanings:

* the **pause** breaker opens on a configuration error (bad credentials, a TLS
  mismatch, a relay that answers AUTH with nonsense): someone must fix a setting;
* the **outage** breaker opens when the provider is unreachable or refuses everyone
  (connection refused, DNS, a 421 greeting, 4yz to MAIL FROM): it will come back.

Either way the message goes back to ``pending`` uncharged, and an open breaker
stops the worker claiming. After a backoff it lets exactly one message through (the
probe, its token the message id); a probe the transport answered past the
connection (any decision other than PAUSE or OUTAGE) closes the breaker.

Not to be confused with operator pauses (``mailout pause``), which an operator sets
per queue or template and which live in the database, nor with a failover member's
breaker (:mod:`mailout.transports.members`), which skips one member while the others
send.
"""

from __future__ import annotations

from mailout.support.breaker import Breaker, Trip

__all__ = ["Breaker", "Breakers", "Trip"]


class Breakers:
    """The pause and outage breakers of one worker process, claimed against together."""

    def __init__(self, pause_seconds: float, pause_cap: float, outage_seconds: float,
                 outage_cap: float) -> None:
        self.pause = Breaker(pause_seconds, pause_cap)
        self.outage = Breaker(outage_seconds, outage_cap)

    @property
    def both(self) -> tuple[Breaker, Breaker]:
        return (self.pause, self.outage)

    @property
    def paused(self) -> bool:
        """True while either breaker is open (claims are probes only)."""
        return self.pause.is_open or self.outage.is_open

    def capacity(self, free: int, in_flight: int) -> int:
        return min(b.capacity(free, in_flight) for b in self.both)

    def probe_started(self, message_id: int) -> bool:
        """Make ``message_id`` the probe of every open breaker, if each has one due.

        False (and no breaker changed) when one is not due: the message was claimed
        by a claim that began before a breaker opened, or another lane has the probe.
        """
        open_ = [b for b in self.both if b.is_open]
        if not all(b.probe_due for b in open_):
            return False
        for b in open_:
            b.probe_started(message_id)
        return True

    def probe_inconclusive(self, message_id: int) -> None:
        for b in self.both:
            b.probe_inconclusive(message_id)

    def seconds_left(self) -> float:
        return max(b.seconds_left() for b in self.both)
