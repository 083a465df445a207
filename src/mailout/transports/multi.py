"""Several transports as one: ``failover(A, B)`` and ``roundrobin(A, B)``.

``failover`` sends through the first member that is up; ``roundrobin`` takes turns
among the members that are up. A member that answers ``PAUSE`` (a configuration
error: bad credentials, a 401) or ``OUTAGE`` (unreachable) is marked down
(:mod:`mailout.transports.members`: for a while that doubles per failed probe, up to
a cap), and the *same* message goes on to the next member at once: nothing was
delivered by the first, so nothing can be doubled. A refusal of one message
(``FAILED``), a rate limit (``RETRY``) or an ``UNKNOWN`` outcome is returned as it
is: failover is about transports, not about one message, and a message that may
have been accepted by A must never be sent through B on the transport's own
initiative. When every member is down, the one that comes back soonest is tried,
and its answer is returned, so the worker's own breaker paces further sends.

Each result names the member that answered (``SendResult.transport``), for the
attempt log and the metrics. :meth:`MultiTransport.route` pins a send to the member
that had an earlier unknown attempt (see ``mailout.delivery.after_unknown``): while
that member is down the message waits for it (``SendResult.waits_for``), alone,
and the other members go on carrying the rest of the mail.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from mailout.exceptions import ConfigError
from mailout.message.envelope import Envelope
from mailout.transports.base import CheckResult, Decision, SendResult, Transport
from mailout.transports.members import Listener, Members, State
from mailout.transports.spec import KEEP_HEADER, TransportSpec

DOWN_SECONDS: Final = 30.0  # a member that failed is skipped this long at first
DOWN_CAP: Final = 600.0  # and never longer than this
SETTING: Final = "MAILOUT_TRANSPORT"
# A message pinned to a member whose probe is out (another send's) tries this soon.
PROBE_WAIT: Final = 1.0
_DOWN = (Decision.PAUSE, Decision.OUTAGE)


class Mode(enum.StrEnum):
    """How a message picks its member."""

    FAILOVER = "failover"  # the first member that is up
    ROUNDROBIN = "roundrobin"  # the next member that is up, in turn


@dataclass(frozen=True, slots=True)
class _Member:
    label: str  # unique among the members: "resend", "smtp", "smtp#2"
    transport: Transport


class MultiTransport:
    """A :class:`~mailout.transports.base.Transport` over several members."""

    dedupe_window: float | None = None  # depends on the member: see window_of()

    def __init__(self, mode: Mode, members: Sequence[tuple[str, Transport]], *,
                 down_seconds: float = DOWN_SECONDS, down_cap: float = DOWN_CAP,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if len(members) < 2:
            raise ValueError("a multi-transport needs at least two members")
        self.mode = mode
        self.name = mode.value
        self._members = [_Member(label, t) for label, t in members]
        self.health = Members(self.name, self.labels, down_seconds=down_seconds,
                              down_cap=down_cap, clock=clock)
        self._turn = 0

    def pace(self, down_seconds: float, down_cap: float) -> None:
        """Skip a failed member this long at first, doubling per failed probe up to
        ``down_cap`` (the worker passes MAILOUT_PAUSE_SECONDS and _PAUSE_CAP_SECONDS)."""
        self.health.pace(down_seconds, down_cap)

    def share_health(self, other: MultiTransport) -> None:
        """See the members as ``other`` does: the lanes of one worker (a transport
        each) share one view, so a member goes down (and is reported) once."""
        if other.labels != self.labels:
            raise ValueError("only a multi-transport over the same members shares health")
        self.health = other.health

    def watch(self, listener: Listener) -> None:
        """Call ``listener`` when a member goes down, fails a probe or comes back."""
        self.health.listener = listener

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(m.label for m in self._members)

    def states(self) -> dict[str, State]:
        return self.health.states()

    def window_of(self, label: str) -> float | None:
        """The dedupe window of the member called ``label`` (None: it has none)."""
        return next((m.transport.dedupe_window for m in self._members if m.label == label),
                    None)

    def is_up(self, label: str) -> bool:
        return label in self.labels and self.health.is_up(label)

    def route(self, label: str, *, only: bool) -> Transport:
        """A view that sends through ``label`` first; with ``only``, through nothing else."""
        return _Route(self, label, only)

    async def send(self, envelope: Envelope) -> SendResult:
        return await self._send(envelope, self._order())

    async def check(self) -> CheckResult:
        results = [(m.label, await m.transport.check()) for m in self._members]
        line = "; ".join(f"{label}: {'ok' if r.ok else 'FAILED'}: {r.line}"
                         for label, r in results)
        warnings = tuple(f"{label}: {w}" for label, r in results for w in r.warnings)
        return CheckResult(all(r.ok for _, r in results), f"{self.name}: {line}", warnings)

    async def close(self) -> None:
        for m in self._members:
            await m.transport.close()

    def _order(self, prefer: str | None = None) -> list[_Member]:
        up = [m for m in self._members if self.health.available(m.label)]
        if self.mode is Mode.ROUNDROBIN and up:
            start = self._turn % len(up)
            self._turn += 1
            up = up[start:] + up[:start]
        if prefer is not None:
            up.sort(key=lambda m: m.label != prefer)  # stable: the rest keep their order
        if not up:  # all down: try the one that comes back first
            up = [min(self._members, key=lambda m: self.health.seconds_left(m.label))]
        return up

    async def _send(self, envelope: Envelope, order: list[_Member]) -> SendResult:
        last: SendResult | None = None
        skipped: list[str] = []
        for member in order:
            result = await self._through(member, envelope, forced=len(order) == 1)
            if result is None:
                continue  # another send took its probe meanwhile
            if result.decision in _DOWN:
                last = result
                skipped.append(f"{member.label} {result.reason}")
                continue  # nothing was delivered: the next member may take it
            if skipped:  # the attempt log says why this member and not the first
                note = f"{', '.join(skipped)}; through {member.label}"
                result = replace(result, detail=f"{note}; {result.detail}"
                                 if result.detail else note)
            return result
        if last is None:  # every member's probe was taken meanwhile: the soonest back
            return await self._send(envelope, [min(
                self._members, key=lambda m: self.health.seconds_left(m.label))])
        return last

    async def _pinned(self, envelope: Envelope, label: str) -> SendResult:
        """A send through ``label`` alone (a message it may already have).

        While the member is down and this send may not probe it, nothing is sent. If
        it is down, or its answer puts it down, the result (``waits_for``) says when
        to try again: only this message waits, and no other member is asked.
        """
        member = next(m for m in self._members if m.label == label)
        result = await self._through(member, envelope, forced=False)
        if result is not None and result.decision not in _DOWN:
            return result
        down = self.health.down(label)
        again = max(self.health.seconds_left(label), PROBE_WAIT)
        if result is None:  # not admitted: it is down (admit() refuses nothing else)
            decision, reason = (down.decision, down.reason) if down else (Decision.OUTAGE,
                                                                          "down")
            return SendResult(decision, reason, transport=label, waits_for=label,
                              retry_after=again, detail=f"{label} is down ({reason}), not "
                                                        f"asked; next try in {again:.0f}s")
        note = f"{label} {result.reason}; next try in {again:.0f}s"
        return replace(result, waits_for=label, retry_after=max(again, result.retry_after or 0),
                       detail=f"{note}; {result.detail}" if result.detail else note)

    async def _through(self, member: _Member, envelope: Envelope, *,
                       forced: bool) -> SendResult | None:
        """One send through ``member``, its answer applied to the member's health;
        None when it is down and this send may not probe it (unless ``forced``)."""
        health, label = self.health, member.label
        token = health.token()
        if not health.admit(label, token) and not forced:
            return None
        try:
            result = replace(await member.transport.send(envelope), transport=label)
        except BaseException:  # cancelled (or a transport bug): no answer either way
            health.abandoned(label, token)
            raise
        if result.decision in _DOWN:
            health.failed(label, result, token)
        else:
            health.answered(label)
        return result


class _Route:
    """One member first (or only), for a message that may already be with it."""

    def __init__(self, parent: MultiTransport, label: str, only: bool) -> None:
        self._parent = parent
        self._label = label
        self._only = only
        self.name = parent.name
        self.dedupe_window = parent.window_of(label)

    async def send(self, envelope: Envelope) -> SendResult:
        # A view of its parent, in the same module: it may use the parent's internals.
        parent = self._parent
        if self._only:
            return await parent._pinned(envelope, self._label)
        return await parent._send(envelope, parent._order(prefer=self._label))

    async def check(self) -> CheckResult:
        return await self._parent.check()

    async def close(self) -> None:
        """The parent owns the connections."""


def split_members(inner: str) -> list[str]:
    """``a, b(c, d), e`` -> ``["a", "b(c, d)", "e"]``: commas at the top level only."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(inner):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    parts.append(inner[start:].strip())
    return [p for p in parts if p]


def parse_spec(url: str, head: str, parse_member: Callable[[str], TransportSpec]
               ) -> TransportSpec:
    """The spec of ``failover(...)`` or ``roundrobin(...)``; members by ``parse_member``."""
    body = url.strip()[len(head):].strip()
    if not (body.startswith("(") and body.endswith(")")):
        raise ConfigError(SETTING, f"{head}(...) must list its transports in parentheses")
    members = [parse_member(u) for u in split_members(body[1:-1])]
    if len(members) < 2:
        raise ConfigError(SETTING, f"{head}(...) needs at least two transports")
    labels = _labels([m.name for m in members])
    headers = {m.key_header for m in members} - {None, KEEP_HEADER}
    if len(headers) > 1:
        raise ConfigError(SETTING, f"{head}(...) mixes relays that want different key "
                                   f"headers ({', '.join(sorted(str(h) for h in headers))})")
    key_header = headers.pop() if headers else (
        KEEP_HEADER if any(m.key_header == KEEP_HEADER for m in members) else None)
    mode = Mode(head)

    def build(concurrency: int) -> Transport:
        return MultiTransport(mode, [(label, m.build(concurrency))
                                     for label, m in zip(labels, members, strict=True)])

    shown = f"{head}({', '.join(m.shown for m in members)})"
    # A send may try every member in turn: the lease must outlast them all.
    return TransportSpec(head, shown, sum(m.timeout for m in members),
                         f"{SETTING} (the sum of its transports' timeouts)", build,
                         key_header=key_header, members=tuple(members))


def _labels(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    labels = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        labels.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return labels
