"""Settings: every bad value stops startup with the name of its variable."""

from __future__ import annotations

import sys

import pytest
import uvloop

from mailout.exceptions import ConfigError
from mailout.transports.smtp.client import SmtpTransport
from mailout.transports.smtp.settings import SmtpSettings, TlsMode
from mailout.worker import config
from mailout.worker.build import loop_factory

BASE = {"MAIL_FROM": "shop@example.com"}


def smtp(s: config.Settings) -> SmtpSettings:
    """The SMTP settings of the transport ``s`` builds for one lane."""
    transport = s.transport.build(s.concurrency)
    assert isinstance(transport, SmtpTransport)
    return transport.settings


def test_defaults() -> None:
    s = config.load(env=BASE)
    assert s.lease_seconds == 120
    assert s.concurrency == 10
    assert s.max_attempts == 8
    assert s.retry_base == 30
    assert s.retry_cap == 3600
    assert s.poll_seconds is None  # chosen per database: 1 s PostgreSQL, 0.2 s SQLite
    assert smtp(s).port == 587
    assert smtp(s).tls is TlsMode.STARTTLS
    assert smtp(config.load(env={**BASE, "SMTP_PORT": "465"})).tls is TlsMode.IMPLICIT
    assert smtp(s).pipelining is True
    assert smtp(config.load(env={**BASE, "SMTP_PIPELINING": "off"})).pipelining is False


def test_overrides_beat_the_environment() -> None:
    s = config.load(env={**BASE, "MAILOUT_CONCURRENCY": "3"}, concurrency=7)
    assert s.concurrency == 7


def test_the_password_is_never_in_repr() -> None:
    s = config.load(env={**BASE, "SMTP_PASS": "hunter2-secret"})
    assert "hunter2-secret" not in repr(s)
    assert "hunter2-secret" not in repr(smtp(s))


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"MAILOUT_LEASE_SECONDS": "-5"}, "MAILOUT_LEASE_SECONDS"),
        ({"SMTP_PIPELINING": "sometimes"}, "SMTP_PIPELINING"),
        ({"MAILOUT_LEASE_SECONDS": "soon"}, "MAILOUT_LEASE_SECONDS"),
        ({"MAILOUT_LEASE_SECONDS": "10", "SMTP_TIMEOUT": "30"}, "MAILOUT_LEASE_SECONDS"),
        ({"MAILOUT_RETRY_BASE_SECONDS": "0"}, "MAILOUT_RETRY_BASE_SECONDS"),
        ({"MAILOUT_RETRY_BASE_SECONDS": "60", "MAILOUT_RETRY_CAP_SECONDS": "30"},
         "MAILOUT_RETRY_CAP_SECONDS"),
        ({"MAILOUT_MAX_ATTEMPTS": "0"}, "MAILOUT_MAX_ATTEMPTS"),
        ({"MAILOUT_MAX_ATTEMPTS": "2.5"}, "MAILOUT_MAX_ATTEMPTS"),
        ({"MAILOUT_CONCURRENCY": "-1"}, "MAILOUT_CONCURRENCY"),
        ({"MAILOUT_POLL_SECONDS": "0"}, "MAILOUT_POLL_SECONDS"),
        ({"SMTP_PORT": "smtp"}, "SMTP_PORT"),
        ({"SMTP_TLS": "maybe"}, "SMTP_TLS"),
        ({"SMTP_TIMEOUT": "-1"}, "SMTP_TIMEOUT"),
        ({"MAILOUT_PAUSE_SECONDS": "60", "MAILOUT_PAUSE_CAP_SECONDS": "10"},
         "MAILOUT_PAUSE_CAP_SECONDS"),
        ({"MAIL_FROM": ""}, "MAIL_FROM"),
        ({"MAIL_FROM": "not an address"}, "MAIL_FROM"),
        ({"MAIL_FROM": "shop@example.com\r\nBcc: x@example.com"}, "MAIL_FROM"),
        ({"MAILOUT_IDEMPOTENCY_HEADER": "Bad Header"}, "MAILOUT_IDEMPOTENCY_HEADER"),
        # float() reads these; a NaN passes every bound check, an endless limit is a typo.
        ({"MAILOUT_LEASE_SECONDS": "nan"}, "MAILOUT_LEASE_SECONDS"),
        ({"MAILOUT_MAX_AGE_SECONDS": "inf"}, "MAILOUT_MAX_AGE_SECONDS"),
        # Finite but past what a database's timestamp holds: every enqueue would fail.
        ({"MAILOUT_MAX_AGE_SECONDS": "1e300"}, "MAILOUT_MAX_AGE_SECONDS"),
        ({"MAILOUT_MAX_AGE_SECONDS": "400000000"}, "MAILOUT_MAX_AGE_SECONDS"),
        ({"MAILOUT_LEASE_SECONDS": "1e300"}, "MAILOUT_LEASE_SECONDS"),
        ({"MAILOUT_RETRY_CAP_SECONDS": "Infinity"}, "MAILOUT_RETRY_CAP_SECONDS"),
        ({"SMTP_TIMEOUT": "NaN"}, "SMTP_TIMEOUT"),
        ({"MAILOUT_LOG_SENDS": "every"}, "MAILOUT_LOG_SENDS"),
        ({"MAILOUT_EVENT_LOOP": "tokio"}, "MAILOUT_EVENT_LOOP"),
    ],
)
def test_bad_values_name_their_setting(env: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.load(env={**BASE, **env})
    assert info.value.setting == setting
    assert setting in str(info.value)


@pytest.mark.parametrize(("raw", "expected"), [
    (None, config.EventLoop.AUTO), ("asyncio", config.EventLoop.ASYNCIO),
    (" UVLOOP ", config.EventLoop.UVLOOP)])
def test_event_loop_setting(raw: str | None, expected: config.EventLoop) -> None:
    env = BASE if raw is None else {**BASE, "MAILOUT_EVENT_LOOP": raw}
    assert config.load(env=env).event_loop is expected


def test_uvloop_asked_for_but_not_installed_is_refused_at_startup(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an uninstalled module looks like
    with pytest.raises(ConfigError, match=r"MAILOUT_EVENT_LOOP: uvloop is not installed"):
        config.load(env={**BASE, "MAILOUT_EVENT_LOOP": "uvloop"})
    assert config.load(env={**BASE, "MAILOUT_EVENT_LOOP": "auto"}).event_loop is \
        config.EventLoop.AUTO


def test_the_worker_loop_follows_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert loop_factory(config.EventLoop.ASYNCIO) is None
    assert loop_factory(config.EventLoop.AUTO) is uvloop.new_event_loop  # installed by [test]
    assert loop_factory(config.EventLoop.UVLOOP) is uvloop.new_event_loop
    monkeypatch.setitem(sys.modules, "uvloop", None)
    assert loop_factory(config.EventLoop.AUTO) is None  # auto falls back to asyncio's


def test_a_choice_setting_lists_its_values() -> None:
    with pytest.raises(ConfigError, match=r"SMTP_TLS: must be starttls, implicit or none, "
                                          r"got 'maybe'"):
        config.load(env={**BASE, "SMTP_TLS": "maybe"})
    assert config.load(env={**BASE, "MAILOUT_ON_UNKNOWN": " HOLD "}).on_unknown.value == "hold"


def test_the_settings_repr_holds_no_password_or_webhook_url() -> None:
    settings = config.load(env={**BASE, "MAILOUT_DATABASE_URL": "postgresql://u:Db-Pw-7731@h/db",
                                "MAILOUT_ALERT_WEBHOOK": "https://hooks.example.com/T0/Tok-9931"})
    shown = repr(settings)
    assert "Db-Pw-7731" not in shown
    assert "Tok-9931" not in shown
    assert "lease_seconds=120.0" in shown  # the rest is still there to debug with


def test_hashed_trace_recipients_need_a_secret_of_16_characters() -> None:
    assert config.load(env=BASE).trace_recipients is config.TraceRecipients.OFF
    for secret in (None, "short-secret"):
        env = {**BASE, "MAILOUT_TRACE_RECIPIENTS": "hashed"}
        if secret:
            env["MAILOUT_TRACE_RECIPIENTS_SECRET"] = secret
        with pytest.raises(ConfigError) as refused:
            config.load(env=env)
        assert refused.value.setting == "MAILOUT_TRACE_RECIPIENTS_SECRET"
        assert "at least 16" in refused.value.reason
        assert secret is None or secret not in str(refused.value)
    good = config.load(env={**BASE, "MAILOUT_TRACE_RECIPIENTS": "hashed",
                            "MAILOUT_TRACE_RECIPIENTS_SECRET": "s" * 16})
    assert good.trace_recipients is config.TraceRecipients.HASHED
    assert "s" * 16 not in repr(good)
