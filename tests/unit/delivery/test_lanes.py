"""Lane and queue-policy specs: parsing and clear errors."""

from __future__ import annotations

import pytest

from mailout.delivery.policy import (
    Lane,
    QueuePolicy,
    RetryPolicy,
    parse_lanes,
    parse_queue_policies,
    policy_for,
    setting_seconds,
)
from mailout.exceptions import ConfigError
from mailout.worker.ratelimit import TokenBucket
from mailout.worker.supervisor import process_plan

DEFAULT = QueuePolicy(RetryPolicy(), 86400.0)


def test_lanes_spec() -> None:
    assert parse_lanes("critical:4,default:8,bulk:2") == [
        Lane("critical", ("critical",), 4), Lane("default", ("default",), 8),
        Lane("bulk", ("bulk",), 2),
    ]
    assert parse_lanes("urgent=critical+login:3") == [Lane("urgent", ("critical", "login"), 3)]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("critical", "needs a concurrency"),
        ("critical:0", "at least 1"),
        ("critical:x", "whole number"),
        ("critical:2,,bulk:1", "empty lane"),
        ("a b:2", "not a valid"),
        ("a:1,a:2", "given twice"),
        ("x=bulk:1,y=bulk:2", "in two lanes"),
    ],
)
def test_bad_lane_specs_say_what_is_wrong(spec: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_lanes(spec)
    assert info.value.setting == "MAILOUT_LANES"
    assert words in str(info.value)


def test_queue_policies() -> None:
    got = parse_queue_policies("critical:max_age=15m,max_attempts=5;bulk:rate=50,retry_base=2m",
                               DEFAULT)
    assert got["critical"].max_age_seconds == 900
    assert got["critical"].retry.max_attempts == 5
    assert got["bulk"].rate_per_second == 50
    assert got["bulk"].retry.base_seconds == 120
    assert got["bulk"].max_age_seconds == 3 * 86400  # the bulk default is kept


def test_default_ages_for_the_conventional_queues() -> None:
    assert policy_for("critical", DEFAULT, {}).max_age_seconds == 900
    assert policy_for("bulk", DEFAULT, {}).max_age_seconds == 3 * 86400
    assert policy_for("default", DEFAULT, {}).max_age_seconds == 86400


@pytest.mark.parametrize(
    "spec",
    ["critical", "critical:max_age", "critical:max_age=soon", "bulk:rate=0",
     "bulk:speed=3", "bulk:max_attempts=0", "bulk:retry_base=10m,retry_cap=1m",
     "bulk:rate=inf", "bulk:rate=nan"],
)
def test_bad_policies_are_refused(spec: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_queue_policies(spec, DEFAULT)
    assert info.value.setting.startswith("MAILOUT_QUEUE_POLICIES")


@pytest.mark.parametrize(("text", "seconds"), [("30", 30), ("30s", 30), ("15m", 900),
                                               ("2h", 7200), ("3d", 259200), ("1.5m", 90),
                                               ("1h30m", 5400), ("2w", 1209600)])
def test_durations(text: str, seconds: float) -> None:
    assert setting_seconds(text, "X") == seconds


def test_a_bad_duration_setting_names_the_setting() -> None:
    with pytest.raises(ConfigError, match="X: '30x' is not a duration"):
        setting_seconds("30x", "X")


def test_token_bucket_paces_after_its_burst() -> None:
    now = [0.0]
    bucket = TokenBucket(10, clock=lambda: now[0])
    assert bucket.take(25) == 10  # a full bucket: one second's worth
    assert bucket.take(5) == 0
    now[0] += 0.5
    assert bucket.take(10) == 5
    bucket.give_back(2)
    assert bucket.take(10) == 2
    assert bucket.wait_time() == pytest.approx(0.1)


def test_lanes_pinned_to_processes() -> None:
    assert parse_lanes("critical:4@1,bulk=bulk+news:16@2,default:8") == [
        Lane("critical", ("critical",), 4, 1), Lane("bulk", ("bulk", "news"), 16, 2),
        Lane("default", ("default",), 8),
    ]


@pytest.mark.parametrize("spec", ["critical:4@", "critical:4@0", "critical:4@x"])
def test_bad_process_counts_say_what_is_wrong(spec: str) -> None:
    with pytest.raises(ConfigError, match="processes after @"):
        parse_lanes(spec)


def test_process_plan_gives_pinned_lanes_their_own_processes() -> None:
    lanes = parse_lanes("critical:4@1,bulk=bulk+news:16@2,default:8,other:2")
    assert process_plan(lanes, 2) == [
        "default:8,other:2", "default:8,other:2", "critical:4", "bulk=bulk+news:16",
        "bulk=bulk+news:16",
    ]
    assert process_plan(parse_lanes("critical:4@1,bulk:16@2"), 1) == [
        "critical:4", "bulk:16", "bulk:16"]
    assert process_plan(parse_lanes("critical:4,bulk:16"), 3) is None  # nothing pinned
    with pytest.raises(ValueError, match="no lane left"):
        process_plan(parse_lanes("critical:4@1"), 2)
