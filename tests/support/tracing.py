"""OpenTelemetry in tests: an SDK tracer provider whose finished spans are kept in memory.

``spans`` (a fixture: import it into the test module) installs the provider as the
global one for one test and removes it after, so that no other test runs under an
SDK. A test module that needs it skips, saying why, when the SDK is not installed
(the ``test`` extra installs it).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.trace",
                    reason="opentelemetry-sdk is not installed (pip install -e '.[test]')")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from mailout.support import _otel_compat

__all__ = ["InMemorySpanExporter", "ReadableSpan", "every_value", "install", "named",
           "spans", "trace", "trace_view", "uninstall"]


def install(provider: TracerProvider) -> None:
    """Make ``provider`` the global one. The API lets a process set it once; tests
    set and reset it (through mailout.support._otel_compat, the one place that
    touches the API's globals)."""
    _otel_compat.install_tracer_provider(provider)


def uninstall() -> None:
    _otel_compat.reset_tracer_provider()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    install(provider)
    try:
        yield exporter
    finally:
        uninstall()
        provider.shutdown()


def named(finished: Iterable[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name.startswith(prefix)]


def every_value(finished: Iterable[ReadableSpan]) -> list[str]:
    """Every attribute value of every span, event and link, as text."""
    values: list[Any] = []
    for span in finished:
        values += [span.name, *(span.attributes or {}).values()]
        for event in span.events:
            values += [event.name, *(event.attributes or {}).values()]
        for link in span.links:
            values += list((link.attributes or {}).values())
        if span.status.description:
            values.append(span.status.description)
    return [str(v) for v in values]


def trace_view(finished: Iterable[ReadableSpan], trace_id: int) -> list[ReadableSpan]:
    """What a trace backend shows from trace ``trace_id`` following links both ways:
    its spans, and those of every trace linked to or from the traces gathered so far."""
    finished = list(finished)
    traces = {trace_id}
    grown = True
    while grown:
        grown = False
        for span in finished:
            assert span.context is not None
            linked = {link.context.trace_id for link in span.links}
            if span.context.trace_id in traces and not linked <= traces:
                traces |= linked
                grown = True
            elif span.context.trace_id not in traces and linked & traces:
                traces.add(span.context.trace_id)
                grown = True
    return [s for s in finished if s.context is not None and s.context.trace_id in traces]
