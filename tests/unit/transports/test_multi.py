"""failover() and roundrobin() over real in-memory transports, with a test clock."""

from __future__ import annotations

from mailout.message.envelope import Envelope
from mailout.models import Mailbox
from mailout.transports.base import Decision, SendResult
from mailout.transports.memory import MemoryTransport
from mailout.transports.multi import Mode, MultiTransport


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def envelope(key: str = "k") -> Envelope:
    return Envelope(message_id=f"<{key}@x>", idempotency_key=key,
                    sender=Mailbox("shop@example.com"), to=(Mailbox("a@example.com"),),
                    subject="s", text="t", html=None, wire_builder=lambda: b"x")


def pair(mode: Mode) -> tuple[MultiTransport, MemoryTransport, MemoryTransport, Clock]:
    a, b, clock = MemoryTransport(name="a"), MemoryTransport(name="b"), Clock()
    return MultiTransport(mode, [("a", a), ("b", b)], down_seconds=30, down_cap=120,
                          clock=clock), a, b, clock


async def test_failover_sends_through_the_first_member_while_it_works() -> None:
    multi, a, b, _ = pair(Mode.FAILOVER)
    results = [await multi.send(envelope(str(i))) for i in range(3)]
    assert [r.transport for r in results] == ["a", "a", "a"]
    assert (len(a.outbox), len(b.outbox)) == (3, 0)


async def test_a_paused_member_hands_the_same_message_to_the_next_at_once() -> None:
    multi, a, b, clock = pair(Mode.FAILOVER)
    a.answer_always(SendResult(Decision.PAUSE, "unauthorized", stage="http", code=401))
    result = await multi.send(envelope())
    assert (result.decision, result.transport) == (Decision.SENT, "b")
    assert len(b.outbox) == 1
    assert not multi.is_up("a")
    await multi.send(envelope("2"))
    assert len(a.attempts) == 1  # skipped while down
    a.answer_always(None)
    clock.now += 31  # down time over: back to the first member
    assert (await multi.send(envelope("3"))).transport == "a"
    assert multi.is_up("a")


async def test_a_refusal_a_rate_limit_or_an_unknown_never_moves_to_the_next_member() -> None:
    multi, a, b, _ = pair(Mode.FAILOVER)
    for decision in (Decision.FAILED, Decision.RETRY, Decision.UNKNOWN):
        a.script(decision)
        result = await multi.send(envelope(decision.value))
        assert (result.decision, result.transport) == (decision, "a")
    assert b.attempts == []


async def test_roundrobin_takes_turns_and_skips_a_member_in_an_outage() -> None:
    multi, a, b, clock = pair(Mode.ROUNDROBIN)
    turns = [(await multi.send(envelope(str(i)))).transport for i in range(4)]
    assert turns == ["a", "b", "a", "b"]
    assert (len(a.outbox), len(b.outbox)) == (2, 2)
    b.answer_always(SendResult(Decision.OUTAGE, "connect_failed"))
    turns = [(await multi.send(envelope(f"o{i}"))).transport for i in range(4)]
    assert turns == ["a", "a", "a", "a"]  # b failed once, then was skipped
    b.answer_always(None)
    clock.now += 31
    turns = [(await multi.send(envelope(f"r{i}"))).transport for i in range(4)]
    assert sorted(turns) == ["a", "a", "b", "b"]  # traffic returns to b


async def test_when_every_member_is_down_the_soonest_back_is_probed() -> None:
    multi, a, b, clock = pair(Mode.FAILOVER)
    a.answer_always(SendResult(Decision.PAUSE, "unauthorized"))
    b.answer_always(SendResult(Decision.OUTAGE, "connect_failed"))
    first = await multi.send(envelope())
    assert (first.decision, first.transport) == (Decision.OUTAGE, "b")
    clock.now += 1
    second = await multi.send(envelope("2"))  # a is back first (both down for 30 s)
    assert second.transport == "a"


async def test_a_route_pins_a_message_to_one_member_even_when_it_is_down() -> None:
    multi, a, b, _ = pair(Mode.FAILOVER)
    a.answer_always(SendResult(Decision.OUTAGE, "connect_failed"))
    pinned = multi.route("a", only=True)
    result = await pinned.send(envelope())
    assert (result.decision, result.transport) == (Decision.OUTAGE, "a")
    assert b.attempts == []
    preferred = multi.route("a", only=False)
    assert (await preferred.send(envelope("2"))).transport == "b"  # a is down: b may take it
