"""Whether the worker reports to OpenTelemetry at all: only when the application set a
meter provider (the API's default records nothing, and creating instruments on it
would cost every attempt for nothing)."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine

from mailout.metrics.otel import OtelObserver, otel_observer
from tests.support.otel_metrics import InMemoryMetricReader, metric_reader, points

__all__ = ["metric_reader"]  # the fixture, imported for the test below


def test_no_meter_provider_no_observer() -> None:
    assert otel_observer(create_engine("sqlite://"), ["default"]) is None


def test_a_meter_provider_gets_an_observer_whose_counters_start_at_zero(
    metric_reader: InMemoryMetricReader,
) -> None:
    found = otel_observer(create_engine("sqlite://"), ["default"])
    assert isinstance(found, OtelObserver)
    sends = {dict(attributes)["mailout.outcome"]: point.value
             for (name, attributes), point in points(metric_reader).items()
             if name == "mailout.sends"}
    assert sends["dead"] == 0
    assert set(sends.values()) == {0}


def test_otel_metrics_exporter_none_means_no_observer(
    metric_reader: InMemoryMetricReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What opentelemetry-instrument does then: a provider with no reader, set anyway.
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    assert otel_observer(create_engine("sqlite://"), ["default"]) is None
