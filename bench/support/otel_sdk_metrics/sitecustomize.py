"""An OpenTelemetry SDK with traces and metrics for a benchmarked worker: put this folder
on PYTHONPATH (``bench.instructions src:bench/support/otel_sdk_metrics``) and Python
runs it at start-up, as ``opentelemetry-instrument`` with ``OTEL_TRACES_EXPORTER`` and
``OTEL_METRICS_EXPORTER`` set would: a tracer provider with a batch processor and a
meter provider with a periodic reader (every 60 s, the SDK's default). Both exporters
drop what they get: the figure is mailout's and the SDK's work, not an exporter's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class _DroppedSpans(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class _DroppedMetrics(MetricExporter):
    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


_tracer_provider = TracerProvider()
_tracer_provider.add_span_processor(BatchSpanProcessor(_DroppedSpans()))
trace.set_tracer_provider(_tracer_provider)
metrics.set_meter_provider(MeterProvider(
    metric_readers=[PeriodicExportingMetricReader(_DroppedMetrics())]))
