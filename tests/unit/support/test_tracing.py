"""mailout.support.tracing: nothing without the API or an SDK, trace ids in JSON lines."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

from mailout.support import tracing
from mailout.support.logs import JsonFormatter
from tests.support.tracing import InMemorySpanExporter, spans, trace

__all__ = ["spans"]  # the fixture, imported for the tests below

ROW = {"queue": "default", "message_id": "<m@x>", "idempotency_key": "k"}


def test_without_the_api_nothing_is_recorded_and_enqueue_never_loads_it() -> None:
    code = """if True:
        import sys
        import mailout.outbox
        loaded_by_import = "opentelemetry" in sys.modules
        sys.modules["opentelemetry"] = None  # as if mailout[otel] were not installed
        from mailout.support import tracing
        with tracing.creating([{"queue": "q", "message_id": "m", "idempotency_key": "k"}]) as c:
            print(loaded_by_import, tracing.tracer(), tracing.current_ids(), c)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "None", "None", "None"]


def test_with_the_api_but_no_sdk_nothing_is_recorded() -> None:
    assert tracing.tracer() is None
    with trace.get_tracer("app").start_as_current_span("request") as request:
        assert not request.get_span_context().is_valid  # the API's no-op span
        with tracing.creating([ROW]) as columns:
            assert columns is None
        assert tracing.current_ids() is None


def test_json_lines_carry_the_active_spans_ids(spans: InMemorySpanExporter) -> None:
    def line() -> dict[str, object]:
        record = logging.LogRecord("mailout.x", logging.INFO, __file__, 1, "hi", None, None)
        event: dict[str, object] = json.loads(JsonFormatter().format(record))
        return event

    assert "trace_id" not in line()
    with trace.get_tracer("app").start_as_current_span("request") as span:
        event = line()
    ctx = span.get_span_context()
    assert event["trace_id"] == f"{ctx.trace_id:032x}"
    assert event["span_id"] == f"{ctx.span_id:016x}"
    assert "trace_id" not in line()
