"""Harnesses the benchmarks and the tests share: an embedded PostgreSQL (``pg``,
``pg_shared``), an SMTP server that can be told to fail (``smtpserver``), test TLS
certificates (``tls``), workers run in-process or as processes (``workers``), fake
provider APIs (``providers``), webhook signers and senders (``webhooks``) and the chaos
run (``chaos``).

They live here, not in ``tests/support``, because ``bench/`` must not import the test
suite; the tests import them from here. May import ``mailout`` and these modules
only, never ``tests``.
"""
