"""An OpenTelemetry SDK for a benchmarked worker: put this folder on PYTHONPATH
(``bench.instructions src:bench/support/otel_sdk``) and Python runs it at start-up, as
``opentelemetry-instrument`` would configure one: a tracer provider with a batch
processor. Its exporter drops the spans, so the figure is mailout's and the SDK's
work per message, not an exporter's network I/O."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class _Dropped(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


_provider = TracerProvider()
_provider.add_span_processor(BatchSpanProcessor(_Dropped()))
trace.set_tracer_provider(_provider)
