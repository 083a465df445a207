"""The HTTP base: when an exchange failed says what it means; Retry-After in both forms."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from mailout.transports.base import Decision
from mailout.transports.http import ApiReply, by_status, exchange_failure, retry_after

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
REQUEST = httpx.Request("POST", "https://api.example.com/emails")


@pytest.mark.parametrize(("error", "decision"), [
    (httpx.ConnectError("refused", request=REQUEST), Decision.OUTAGE),  # nothing sent
    (httpx.ConnectTimeout("slow", request=REQUEST), Decision.OUTAGE),
    (httpx.PoolTimeout("busy", request=REQUEST), Decision.RETRY),
    (httpx.WriteTimeout("stuck", request=REQUEST), Decision.RETRY),  # never a whole request
    (httpx.WriteError("reset", request=REQUEST), Decision.RETRY),
    (httpx.ReadTimeout("silent", request=REQUEST), Decision.UNKNOWN),  # sent, no answer
    (httpx.ReadError("reset", request=REQUEST), Decision.UNKNOWN),
    (httpx.RemoteProtocolError("closed", request=REQUEST), Decision.UNKNOWN),
])
def test_a_failed_exchange_means_what_its_moment_says(error: httpx.HTTPError,
                                                      decision: Decision) -> None:
    assert exchange_failure(error).decision is decision


@pytest.mark.parametrize(("value", "seconds"), [
    ("7", 7.0), (" 2.5 ", 2.5), ("-3", 0.0), ("999999", 86400.0),
    ("Thu, 01 Jan 2026 12:00:30 GMT", 30.0), ("Thu, 01 Jan 2026 11:00:00 GMT", 0.0),
    ("soon", None), ("", None), (None, None), ("nan", None),
])
def test_retry_after_reads_seconds_and_http_dates(value: str | None,
                                                  seconds: float | None) -> None:
    assert retry_after(value, now=NOW) == seconds


@pytest.mark.parametrize(("status", "decision", "reason"), [
    (200, Decision.SENT, "accepted"), (202, Decision.SENT, "accepted"),
    (400, Decision.FAILED, "rejected"), (422, Decision.FAILED, "rejected"),
    (413, Decision.FAILED, "too_large"), (401, Decision.PAUSE, "unauthorized"),
    (403, Decision.PAUSE, "unauthorized"), (408, Decision.RETRY, "try_again"),
    (429, Decision.RETRY, "rate_limited"), (500, Decision.RETRY, "server_error"),
    (503, Decision.RETRY, "server_error"),
])
def test_the_usual_meaning_of_each_status(status: int, decision: Decision, reason: str) -> None:
    result = by_status(ApiReply(status, httpx.Headers({"Retry-After": "4"}), b""), "words")
    assert (result.decision, result.reason, result.code, result.stage) == (
        decision, reason, status, "http")
    assert result.retry_after == (4.0 if decision is Decision.RETRY else None)
