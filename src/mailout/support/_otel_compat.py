"""Every use of opentelemetry-api's private API, in one place, for the supported range only.

Supported: opentelemetry-api >= 1.24, < 2 (:data:`SUPPORTED`; the bound on the
``otel`` extra in pyproject.toml). tests/unit/support/test_otel_compat.py checks that
the installed version is in that range and that each name below still exists; on a
version that changed one, it fails naming it.

The API lets a process set its global tracer and meter providers once, and has no
public way to undo that. Tests (and a test harness embedding a worker) install an
SDK provider for one test and must take it away after, as opentelemetry-test-utils
does, through the same module globals:

* ``opentelemetry.trace._TRACER_PROVIDER`` and ``._TRACER_PROVIDER_SET_ONCE``
  (:func:`install_tracer_provider`, :func:`reset_tracer_provider`);
* ``opentelemetry.metrics._internal._METER_PROVIDER`` and
  ``._METER_PROVIDER_SET_ONCE`` (:func:`install_meter_provider`,
  :func:`reset_meter_provider`);
* ``opentelemetry.util._once.Once``, the guard both set-once flags are;
* the class name ``_ProxyMeterProvider`` (:func:`is_placeholder_meter_provider`): the
  API's stand-in before any provider is set, which records nothing. It has no public
  name; a NoOp provider, in contrast, is one an application set on purpose.

Why below 2: a major release may move any of these. Nothing here is imported unless
opentelemetry-api is installed and the caller asks.
"""

from __future__ import annotations

from typing import Any, Final

SUPPORTED: Final = ((1, 24), (2,))  # lowest supported, first unsupported
PLACEHOLDER_METER_PROVIDER: Final = "_ProxyMeterProvider"


def install_tracer_provider(provider: Any) -> None:
    """Make ``provider`` the global tracer provider, even when one was set before."""
    from opentelemetry import trace
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace.set_tracer_provider(provider)


def reset_tracer_provider() -> None:
    """Back to no global tracer provider (the API's proxy until one is set)."""
    from opentelemetry import trace
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()


def install_meter_provider(provider: Any) -> None:
    """Make ``provider`` the global meter provider, even when one was set before."""
    from opentelemetry.metrics import _internal as metrics_globals
    from opentelemetry.util._once import Once

    metrics_globals._METER_PROVIDER_SET_ONCE = Once()
    metrics_globals.set_meter_provider(provider)


def reset_meter_provider() -> None:
    """Back to no global meter provider (the API's proxy until one is set)."""
    from opentelemetry.metrics import _internal as metrics_globals
    from opentelemetry.util._once import Once

    metrics_globals._METER_PROVIDER = None
    metrics_globals._METER_PROVIDER_SET_ONCE = Once()


def is_placeholder_meter_provider(provider: object) -> bool:
    """Is ``provider`` the API's stand-in, returned while no provider is set?"""
    return type(provider).__name__ == PLACEHOLDER_METER_PROVIDER
