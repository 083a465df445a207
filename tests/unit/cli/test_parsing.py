"""The CLI's small parsers and formatters: durations, moments, ages, JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from mailout.cli import display
from mailout.cli.changes import idempotency_window
from mailout.cli.common import parse_moment, parse_span
from mailout.exceptions import ConfigError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("45s", timedelta(seconds=45)),
        ("15m", timedelta(minutes=15)),
        ("12h", timedelta(hours=12)),
        ("30d", timedelta(days=30)),
        ("2w", timedelta(weeks=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1.5h", timedelta(minutes=90)),
        (" 7D ", timedelta(days=7)),
        ("0s", timedelta(0)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_span(text) == expected


@pytest.mark.parametrize("text", ["", "30", "d", "30x", "-1d", "1 d", "1h 30m", "h1", "1d2"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_span(text)


def test_moments_default_to_utc_and_convert_zones() -> None:
    assert parse_moment("2024-05-01T12:00") == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert parse_moment("2024-05-01") == datetime(2024, 5, 1, tzinfo=UTC)
    assert parse_moment("2024-05-01T14:00+02:00") == datetime(2024, 5, 1, 12, tzinfo=UTC)
    with pytest.raises(ValueError, match="isoformat"):
        parse_moment("yesterday")


def test_idempotency_window_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAILOUT_IDEMPOTENCY_WINDOW", raising=False)
    assert idempotency_window() == timedelta(days=30)
    monkeypatch.setenv("MAILOUT_IDEMPOTENCY_WINDOW", "7d")
    assert idempotency_window() == timedelta(days=7)
    monkeypatch.setenv("MAILOUT_IDEMPOTENCY_WINDOW", "a week")
    with pytest.raises(ConfigError, match="MAILOUT_IDEMPOTENCY_WINDOW"):
        idempotency_window()


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "-"), (4.24, "4.2s"), (65, "1m 5s"), (3 * 3600 + 120, "3h 2m"), (3600, "1h"),
     (2 * 86400 + 4 * 3600, "2d 4h"), (30 * 86400, "30d")],
)
def test_ages(seconds: float | None, shown: str) -> None:
    assert display.age(seconds) == shown


def test_json_output_uses_utc_iso_times() -> None:
    moment = datetime(2024, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    doc = json.loads(display.to_json({"at": moment, "items": [(1, None)]}))
    assert doc == {"at": "2024-05-01T12:00:00+00:00", "items": [[1, None]]}
    assert display.when(moment) == "2024-05-01 12:00:00.000Z"
