"""OpenTelemetry metrics in tests: an SDK meter provider read by an in-memory reader.

``metric_reader`` (a fixture: import it into the test module) installs the provider as
the global one for one test and removes it after. ``points`` flattens what the reader
collected into ``{(name, attributes): point}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.metrics",
                    reason="opentelemetry-sdk is not installed (pip install -e '.[test]')")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricReader

from mailout.support import _otel_compat

__all__ = ["InMemoryMetricReader", "install_meter_provider", "metric_reader", "points",
           "uninstall_meter_provider"]

Points = dict[tuple[str, frozenset[tuple[str, Any]]], Any]


def install_meter_provider(provider: MeterProvider) -> None:
    """Make ``provider`` the global one; the API allows it once per process, so tests
    set and reset it through mailout.support._otel_compat, the one place that touches
    the API's private globals."""
    _otel_compat.install_meter_provider(provider)


def uninstall_meter_provider() -> None:
    _otel_compat.reset_meter_provider()


@pytest.fixture
def metric_reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    install_meter_provider(provider)
    try:
        yield reader
    finally:
        uninstall_meter_provider()
        provider.shutdown()


def points(reader: MetricReader | InMemoryMetricReader) -> Points:
    """Every data point the reader collects now, by metric name and attributes."""
    assert isinstance(reader, InMemoryMetricReader)
    data = reader.get_metrics_data()
    found: Points = {}
    if data is None:
        return found
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    found[(metric.name, frozenset((point.attributes or {}).items()))] = point
    return found
