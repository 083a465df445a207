"""Small helpers every layer above shares, none of them about e-mail itself.

Owns database times made comparable (``timeutil``), the parsers every setting uses
(``envparse``), which hosts are loopback (``hosts``), text shown to people with
control characters written out (``visible``), text and JSON logs with recipients
masked (``logs``), alert delivery: callback and webhook, off the event loop
(``alerts``), and the circuit breaker counted per probe cycle that the worker and
each failover member share (``breaker``), and OpenTelemetry spans when the application
configured an SDK (``tracing``; the ``mailout[otel]`` extra, imported lazily).

May import: ``mailout.models`` and ``mailout.exceptions`` only
(tests/unit/test_layering.py).
"""
