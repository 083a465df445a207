"""A small OTLP/HTTP receiver on loopback: what a collector would get.

``OtlpReceiver`` serves ``POST /v1/traces`` and ``POST /v1/metrics`` from a thread,
decodes each request's protobuf body (``opentelemetry-proto``'s
``ExportTraceServiceRequest`` / ``ExportMetricsServiceRequest``, gzip or not) and keeps
its spans and metrics; ``wait_for_spans`` and ``wait_for_metrics`` wait until some
arrived. Anything else gets 404.
"""

from __future__ import annotations

import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import pytest

pytest.importorskip("opentelemetry.proto",
                    reason="opentelemetry-proto is not installed (pip install -e '.[test]')")

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span


class OtlpReceiver:
    """Collects the spans and metrics OTLP/HTTP exporters post to :attr:`endpoint`
    (traces) and :attr:`metrics_endpoint`; :attr:`base` is what
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.metrics: list[Metric] = []
        self.resources: list[dict[str, Any]] = []
        self.content_types: list[str] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path not in ("/v1/traces", "/v1/metrics"):
                    self.send_error(404)
                    return
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                content_type = self.headers.get("Content-Type") or ""
                if self.path == "/v1/traces":
                    receiver._received(content_type, ExportTraceServiceRequest.FromString(body))
                    reply = ExportTraceServiceResponse().SerializeToString()
                else:
                    receiver._received_metrics(ExportMetricsServiceRequest.FromString(body))
                    reply = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: the test reads what arrived, not the access log

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.endpoint = f"{self.base}/v1/traces"
        self.metrics_endpoint = f"{self.base}/v1/metrics"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="otlp-receiver")

    def _received(self, content_type: str, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.content_types.append(content_type)
            for resource_spans in request.resource_spans:
                self.resources.append({a.key: a.value.string_value
                                       for a in resource_spans.resource.attributes})
                for scope_spans in resource_spans.scope_spans:
                    self.spans.extend(scope_spans.spans)

    def _received_metrics(self, request: ExportMetricsServiceRequest) -> None:
        with self._lock:
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    self.metrics.extend(scope_metrics.metrics)

    def wait_for_metrics(self, *names: str, timeout: float = 10.0) -> dict[str, Metric]:
        """The last export of each metric named, once every one of them arrived."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                found = {m.name: m for m in self.metrics}
            if set(names) <= set(found):
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"metrics arrived: {sorted(found)}; expected {names}")
            time.sleep(0.02)

    def wait_for_spans(self, count: int, timeout: float = 10.0) -> list[Span]:
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if len(self.spans) >= count:
                    return list(self.spans)
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.spans)} spans arrived, expected {count}")
            time.sleep(0.02)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
