"""A failover member's down time, against real servers: one probe cycle per failure.

Member A is a real Resend transport speaking to a local Resend-compatible HTTP
server that answers 401; member B a real SMTP transport to a local SMTP server.
The multi-transport runs on a test clock, so the down times (30 s, 60 s) are the
real defaults without waiting for them.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from bench.support.providers.resend import FakeResend
from bench.support.providers.resend import error as resend_error
from bench.support.smtpserver import SmtpTestServer

from mailout.transports.base import Decision, Transport
from mailout.transports.members import Change, State
from mailout.transports.multi import Mode, MultiTransport
from tests.support.transport_harness import build, provider_url
from tests.unit.transports.test_multi import Clock, envelope

UNAUTHORIZED = resend_error(401, "missing_api_key", "Missing API key")
IN_FLIGHT = 10


def multi(mode: Mode, a: FakeResend, b: SmtpTestServer, clock: Clock) -> MultiTransport:
    members: list[tuple[str, Transport]] = [
        ("resend", build(provider_url("resend", a.secret, a.url))),
        ("smtp", build(f"smtp://{b.host}:{b.port}?tls=none")),
    ]
    return MultiTransport(mode, members, clock=clock)  # the defaults: 30 s, up to 600 s


def down_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if getattr(r, "event", "") in ("member_down", "member_probe_failed")]


async def test_ten_sends_in_flight_meeting_a_401_are_one_down_time_and_a_probe_doubles_it(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mailout.transports.members")
    clock = Clock()
    changes: list[Change] = []
    with FakeResend() as a, SmtpTestServer() as b:
        a.answer_always(UNAUTHORIZED)
        a.delay = 0.3  # each 401 comes late: all ten are in flight to A together
        transport = multi(Mode.FAILOVER, a, b, clock)
        transport.watch(changes.append)
        try:
            results = await asyncio.gather(
                *(transport.send(envelope(f"k{i}")) for i in range(IN_FLIGHT)))
            assert len(a.requests) == IN_FLIGHT  # all ten reached A before any answer
            assert {(r.decision, r.transport) for r in results} == {(Decision.SENT, "smtp")}
            assert down_lines(caplog) == ["failover: transport resend is down for 30s "
                                          "(unauthorized)"]
            assert [(c.state, c.transition) for c in changes] == [(State.DOWN, True)]

            await transport.send(envelope("skipped"))  # inside the 30 s: A is not asked
            assert len(a.requests) == IN_FLIGHT
            clock.now += 30
            probe = await transport.send(envelope("probe"))
            assert (probe.decision, probe.transport) == (Decision.SENT, "smtp")
            assert len(a.requests) == IN_FLIGHT + 1
            assert down_lines(caplog)[1:] == [
                "failover: transport resend is still down: probe failed (unauthorized); "
                "down for 60s"]
            assert changes[-1].transition is False  # a failed probe: no new alert
            assert len(b.messages) == IN_FLIGHT + 2
        finally:
            await transport.close()


async def test_roundrobin_traffic_returns_to_a_member_after_its_first_successful_probe(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mailout.transports.members")
    clock = Clock()
    with FakeResend() as a, SmtpTestServer() as b:
        a.answer_always(UNAUTHORIZED)
        transport = multi(Mode.ROUNDROBIN, a, b, clock)
        try:
            turns = [(await transport.send(envelope(f"d{i}"))).transport for i in range(4)]
            assert turns == ["smtp"] * 4  # A's 401 moved its turn on to B, then skipped
            assert not transport.is_up("resend")
            a.answer_always(None)  # the key is fixed
            clock.now += 29
            assert (await transport.send(envelope("early"))).transport == "smtp"
            clock.now += 1
            turns = [(await transport.send(envelope(f"u{i}"))).transport for i in range(4)]
            # Its first turn probes it; the probe works, so it keeps its turns.
            assert turns in (["resend", "smtp"] * 2, ["smtp", "resend"] * 2)
            assert transport.is_up("resend")
            assert len(a.delivered) == turns.count("resend")
            back = [r.getMessage() for r in caplog.records
                    if getattr(r, "event", "") == "member_back"]
            assert back == ["roundrobin: transport resend is back after 30s down "
                            "(0 failed probes)"]
        finally:
            await transport.close()
