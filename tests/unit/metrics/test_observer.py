"""PrometheusObserver counting and health decisions, without a worker or a database."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from prometheus_client import generate_latest

from mailout.metrics.prometheus import PrometheusObserver
from mailout.models import ClaimedMessage, Completion, Outcome, Status


def _msg(queue: str = "default", waited: float = 2.0) -> ClaimedMessage:
    claimed = datetime.now(UTC)
    return ClaimedMessage(
        id=1, key="k", queue=queue, priority=0, recipient="a@example.com", sender=None,
        template=None, params=None, subject="s", text="t", html=None, headers=None,
        message_id="<m@x>", attempts=1, unknown_attempts=0,
        created_at=claimed - timedelta(seconds=waited), expires_at=None, lease_token="t",
        claimed_at=claimed, reclaimed=False)


def _done(outcome: Outcome, *, logged: bool = True) -> Completion:
    return Completion(id=1, lease_token="t", attempt=1, outcome=outcome, status=Status.SENT,
                      started_at=datetime.now(UTC), worker="w", recipient="a@example.com",
                      logged=logged)


def _value(obs: PrometheusObserver, name: str, **labels: str) -> float | None:
    return obs.registry.get_sample_value(name, labels)


def test_attempts_count_by_queue_and_outcome_and_time_delivery() -> None:
    obs = PrometheusObserver()
    obs.attempt(_msg(waited=2.0), _done(Outcome.SENT), 0.5)
    obs.attempt(_msg("bulk"), _done(Outcome.RETRY), 0.1)
    obs.attempt(_msg("bulk"), _done(Outcome.DEAD), 0.1)
    obs.attempt(_msg(), _done(Outcome.UNKNOWN, logged=False), 0.0)  # nothing was attempted
    assert _value(obs, "mailout_sends_total", queue="default", outcome="sent") == 1
    assert _value(obs, "mailout_sends_total", queue="bulk", outcome="retry") == 1
    assert _value(obs, "mailout_sends_total", queue="bulk", outcome="dead") == 1
    assert _value(obs, "mailout_sends_total", queue="default", outcome="unknown") is None
    assert _value(obs, "mailout_attempt_duration_seconds_count", queue="bulk") == 2
    assert _value(obs, "mailout_delivery_latency_seconds_count", queue="default") == 1
    latency = _value(obs, "mailout_delivery_latency_seconds_sum", queue="default")
    assert latency is not None
    assert 2.4 < latency < 2.7  # created -> claimed on the DB clock, plus the send


def test_a_metrics_error_never_escapes_into_the_worker() -> None:
    obs = PrometheusObserver()
    bad = _msg()
    naive = ClaimedMessage(**{**{f: getattr(bad, f) for f in bad.__slots__},
                              "created_at": datetime(2024, 1, 1)})  # naive - aware: TypeError
    obs.attempt(naive, _done(Outcome.SENT), 0.1)  # must not raise
    assert _value(obs, "mailout_sends_total", queue="default", outcome="sent") == 1


def test_each_observer_has_its_own_registry() -> None:
    one, two = PrometheusObserver(), PrometheusObserver()
    one.reclaimed(_msg())
    assert _value(one, "mailout_lease_reclaims_total", queue="default") == 1
    assert _value(two, "mailout_lease_reclaims_total", queue="default") is None
    assert b"mailout_transport_paused 0.0" in generate_latest(two.registry)


def test_readiness_follows_database_and_pause() -> None:
    obs = PrometheusObserver(live_after=5)
    assert obs.readiness() == (False, "starting")
    assert obs.liveness()[0]  # starting counts as alive for a while
    obs.tick()
    obs.database(True)
    assert obs.readiness() == (True, "ready")
    obs.paused("bad_credentials")
    assert obs.readiness() == (False, "transport paused: bad_credentials")
    assert _value(obs, "mailout_transport_paused") == 1
    obs.paused(None)
    obs.database(False)
    ready, why = obs.readiness()
    assert not ready
    assert why.startswith("database unreachable")
    assert _value(obs, "mailout_database_up") == 0
    obs.database(True)
    assert obs.readiness() == (True, "ready")


def test_the_outage_gauge_carries_its_reason_and_leaves_readiness_alone() -> None:
    obs = PrometheusObserver(live_after=5)
    obs.tick()
    obs.database(True)
    assert _value(obs, "mailout_transport_outage", reason="") == 0
    obs.outage("connect_refused")
    assert _value(obs, "mailout_transport_outage", reason="connect_refused") == 1
    assert _value(obs, "mailout_transport_outage", reason="") is None  # one series at a time
    assert obs.readiness() == (True, "ready")  # /readyz keeps its meaning
    assert (_value(obs, "mailout_transport_outage_seconds") or 0) >= 0
    obs.outage(None)
    assert _value(obs, "mailout_transport_outage", reason="connect_refused") is None
    assert _value(obs, "mailout_transport_outage", reason="") == 0
    assert _value(obs, "mailout_transport_outage_seconds") == 0


def test_liveness_fails_when_the_loop_stops_ticking() -> None:
    obs = PrometheusObserver(live_after=5)
    obs.tick()
    obs.database(True)
    assert obs.liveness()[0]
    obs._last_tick = time.monotonic() - 6
    alive, why = obs.liveness()
    assert not alive
    assert why.startswith("stalled")
    assert not obs.readiness()[0]
    obs.database(False)  # the loop backs off up to 30 s while the database is down
    assert obs.liveness()[0]
    wall = _value(obs, "mailout_worker_last_tick_timestamp_seconds")
    assert wall is not None
    assert abs(wall - time.time()) < 5
