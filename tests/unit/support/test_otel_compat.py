"""The opentelemetry-api internals mailout.support._otel_compat relies on: the
installed version is in the supported range, each private name is still there, and
installing and resetting the global providers works. A newer API that moved one
fails here, by name, rather than as a test that leaks its provider into the next."""

from __future__ import annotations

from importlib.metadata import version

import pytest

pytest.importorskip("opentelemetry.sdk.metrics",
                    reason="opentelemetry-sdk is not installed (pip install -e '.[test]')")

from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_globals
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.util import _once

from mailout.support import _otel_compat as compat
from tests.support.pins import installed, pinned_range, shown

LOWEST, FIRST_UNSUPPORTED = compat.SUPPORTED


def changed(what: str) -> str:
    return (f"opentelemetry-api {version('opentelemetry-api')} changed {what}, which "
            "mailout/support/_otel_compat.py relies on (supported: "
            f">={shown(LOWEST)},<{shown(FIRST_UNSUPPORTED)}); adapt that module, "
            "then move SUPPORTED and the bound on the otel extra in pyproject.toml")


def test_the_installed_api_is_in_the_supported_range() -> None:
    assert LOWEST <= installed("opentelemetry-api") < FIRST_UNSUPPORTED, changed("its version")


def test_pyproject_pins_the_supported_range_on_the_otel_extra() -> None:
    assert pinned_range("opentelemetry-api", extra="otel") == compat.SUPPORTED


@pytest.mark.parametrize(("module", "name"), [
    (trace, "_TRACER_PROVIDER"), (trace, "_TRACER_PROVIDER_SET_ONCE"),
    (metrics_globals, "_METER_PROVIDER"), (metrics_globals, "_METER_PROVIDER_SET_ONCE"),
    (_once, "Once"), (metrics_globals, compat.PLACEHOLDER_METER_PROVIDER),
])
def test_private_names_exist(module: object, name: str) -> None:
    assert hasattr(module, name), changed(f"{getattr(module, '__name__', module)}.{name}")


def test_a_tracer_provider_installed_twice_is_the_second_and_reset_is_none() -> None:
    first, second = TracerProvider(), TracerProvider()
    try:
        compat.install_tracer_provider(first)
        compat.install_tracer_provider(second)
        assert trace.get_tracer_provider() is second, changed("setting the tracer provider")
    finally:
        compat.reset_tracer_provider()
    assert trace._TRACER_PROVIDER is None, changed("resetting the tracer provider")
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"


def test_a_meter_provider_installed_twice_is_the_second_and_reset_is_the_placeholder() -> None:
    first, second = MeterProvider(), MeterProvider()
    try:
        compat.install_meter_provider(first)
        compat.install_meter_provider(second)
        assert metrics.get_meter_provider() is second, changed("setting the meter provider")
        assert not compat.is_placeholder_meter_provider(second)
    finally:
        compat.reset_meter_provider()
        first.shutdown()
        second.shutdown()
    assert compat.is_placeholder_meter_provider(metrics.get_meter_provider()), \
        changed("the placeholder meter provider's class name")
