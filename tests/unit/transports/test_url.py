"""MAILOUT_TRANSPORT: each URL form builds the transport it names, or says what is wrong."""

from __future__ import annotations

import pytest

from mailout.exceptions import ConfigError
from mailout.transports import url
from mailout.transports.memory import MemoryTransport
from mailout.transports.smtp.client import SmtpTransport
from mailout.transports.smtp.settings import SmtpSettings, TlsMode


def smtp(spec: url.TransportSpec, concurrency: int = 3) -> SmtpSettings:
    transport = spec.build(concurrency)
    assert isinstance(transport, SmtpTransport)
    return transport.settings


def test_unset_means_smtp_from_the_smtp_variables() -> None:
    spec = url.parse(None, {"SMTP_HOST": "relay.example", "SMTP_PORT": "2525",
                            "SMTP_USER": "u", "SMTP_PASS": "p"}, concurrency=3)
    s = smtp(spec)
    assert (s.host, s.port, s.username, s.password, s.tls) == (
        "relay.example", 2525, "u", "p", TlsMode.STARTTLS)
    assert s.pool_size == 3  # one connection per concurrent send of the lane
    assert (spec.name, spec.timeout, spec.timeout_setting) == ("smtp", 30.0, "SMTP_TIMEOUT")


def test_smtp_url_with_credentials_and_options() -> None:
    spec = url.parse("smtp://mailer:p%40ss%3Aword@relay.example:2525?tls=none&timeout=7"
                     "&pool_size=2&pipelining=false", {}, concurrency=9)
    s = smtp(spec, concurrency=9)
    assert (s.host, s.port, s.username, s.password) == ("relay.example", 2525, "mailer",
                                                       "p@ss:word")
    assert (s.tls, s.timeout, s.pool_size, s.pipelining) == (TlsMode.NONE, 7.0, 2, False)
    assert spec.timeout == 7.0
    assert "p@ss" not in spec.shown
    assert "p%40ss" not in spec.shown
    assert "p%40ss" not in repr(spec)
    assert "p@ss" not in repr(s)


def test_smtps_means_implicit_tls_on_465() -> None:
    s = smtp(url.parse("smtps://u:p@relay.example", {}, concurrency=1))
    assert (s.port, s.tls) == (465, TlsMode.IMPLICIT)


def test_the_url_wins_over_the_variables_and_they_fill_the_rest() -> None:
    env = {"SMTP_HOST": "other.example", "SMTP_TIMEOUT": "12", "SMTP_POOL_SIZE": "2"}
    s = smtp(url.parse("smtp://relay.example", env, concurrency=1))
    assert (s.host, s.timeout, s.pool_size) == ("relay.example", 12.0, 2)


def test_memory() -> None:
    spec = url.parse("memory://", {}, concurrency=4)
    assert isinstance(spec.build(4), MemoryTransport)
    assert spec.name == "memory"


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("carrier-pigeon://coop", "unknown scheme"),
        ("smtp://relay.example?colour=blue", "unknown parameter 'colour'"),
        ("smtp://relay.example?timeout=soon", "must be a number"),
        ("smtp://relay.example:99999", "port"),
        ("smtps://relay.example?tls=starttls", "implicit TLS"),
    ],
)
def test_a_bad_url_names_the_setting(given: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as caught:
        url.parse(given, {}, concurrency=1)
    assert caught.value.setting.startswith("MAILOUT_TRANSPORT")
