"""Provider URLs, relay presets and multi-transports: what each builds, what it shows."""

from __future__ import annotations

import pytest

from mailout.exceptions import ConfigError
from mailout.transports import url
from mailout.transports.brevo import key_uuid
from mailout.transports.http import HttpTransport
from mailout.transports.multi import MultiTransport, split_members
from mailout.transports.smtp.client import SmtpTransport


def built(spec: url.TransportSpec) -> HttpTransport:
    transport = spec.build(2)
    assert isinstance(transport, HttpTransport)
    return transport


@pytest.mark.parametrize(("given", "name", "endpoint", "window"), [
    ("resend://re_AbC123", "resend", "https://api.resend.com", 86400.0),
    ("postmark://0000-TOKEN", "postmark", "https://api.postmarkapp.com", None),
    ("sendgrid://SG.Key.Secret", "sendgrid", "https://api.sendgrid.com", None),
    ("brevo://xkeysib-Secret", "brevo", "https://api.brevo.com", 900.0),
    ("mailgun://key-Secret@mg.example.com", "mailgun", "https://api.mailgun.net", None),
    ("mailgun://key-Secret@mg.example.com?region=eu", "mailgun", "https://api.eu.mailgun.net",
     None),
    ("ses://AKID:se%2Fcr%2Bet@eu-west-1", "ses", "https://email.eu-west-1.amazonaws.com", None),
])
def test_each_provider_url_builds_its_transport_and_hides_its_secret(
    given: str, name: str, endpoint: str, window: float | None,
) -> None:
    spec = url.parse(given, {}, concurrency=2)
    transport = built(spec)
    assert (spec.name, transport.name, transport.endpoint) == (name, name, endpoint)
    assert transport.dedupe_window == window
    assert spec.key_header is None  # the key travels in the API's own field, if anywhere
    for secret in ("AbC123", "TOKEN", "Key.Secret", "xkeysib-Secret", "key-Secret",
                   "se/cr+et", "se%2Fcr"):
        assert secret not in spec.shown
        assert secret not in repr(spec)
        assert secret not in transport.shown


def test_an_endpoint_and_timeout_point_the_transport_at_a_local_server() -> None:
    spec = url.parse("resend://re_x?endpoint=http://127.0.0.1:8025/&timeout=2.5", {},
                     concurrency=1)
    assert built(spec).endpoint == "http://127.0.0.1:8025"
    assert spec.timeout == 2.5
    assert "127.0.0.1:8025" in spec.shown


@pytest.mark.parametrize(("given", "complaint"), [
    ("resend://re_x?endpoint=http://api.example.com", "http:// only on loopback"),
    ("resend://re_x?endpoint=ftp://127.0.0.1", "https://"),
    ("resend://re_x?timeout=0", "?timeout must be greater than 0"),
    ("resend://re_x?timeout=soon", "?timeout must be a number"),
    ("resend://re_x?timeout=inf", "?timeout must be a number"),
    ("resend://re_x?timeout=nan", "?timeout must be a number"),
    ("resend://re_x?region=eu", "unknown parameter 'region'"),
    ("resend://", "needs the API key"),
    ("mailgun://mg.example.com", "KEY@DOMAIN"),
    ("mailgun://k@mg.example.com?region=asia", "us or eu"),
    ("ses://AKID@eu-west-1", "ACCESS:SECRET@REGION"),
    ("smtp+nowhere://u:p@relay", "unknown relay preset"),
    ("carrier-pigeon://x", "unknown scheme"),
    ("failover(resend://k)", "at least two"),
    ("failover resend://k", "unknown scheme"),
])
def test_a_bad_provider_url_names_the_setting_and_the_problem(given: str,
                                                              complaint: str) -> None:
    with pytest.raises(ConfigError) as caught:
        url.parse(given, {}, concurrency=1)
    assert caught.value.setting == "MAILOUT_TRANSPORT"
    assert complaint in str(caught.value)


def test_the_resend_relay_preset_sends_resends_key_header_and_declares_its_window() -> None:
    spec = url.parse("smtp+resend://resend:re_Secret@", {}, concurrency=2)
    transport = spec.build(2)
    assert isinstance(transport, SmtpTransport)
    assert (transport.name, transport.dedupe_window) == ("smtp+resend", 86400.0)
    assert transport.settings.host == "smtp.resend.com"  # the documented relay
    assert spec.key_header == "Resend-Idempotency-Key"
    assert "re_Secret" not in spec.shown


@pytest.mark.parametrize("provider", ["postmark", "sendgrid", "mailgun", "brevo"])
def test_relay_presets_without_a_documented_key_header_send_none(provider: str) -> None:
    spec = url.parse(f"smtp+{provider}://u:p@", {}, concurrency=1)
    transport = spec.build(1)
    assert (spec.key_header, transport.dedupe_window) == (None, None)


def test_plain_smtp_keeps_the_configured_informational_header() -> None:
    assert url.parse("smtp://u:p@relay.example", {}, concurrency=1).key_header == url.KEEP_HEADER


def test_failover_lists_its_members_and_names_each_one() -> None:
    spec = url.parse("failover(resend://re_Secret?timeout=5, smtp://u:pw@relay.example:587,"
                     " smtp://u:pw@backup.example)", {}, concurrency=2)
    transport = spec.build(2)
    assert isinstance(transport, MultiTransport)
    assert transport.labels == ("resend", "smtp", "smtp#2")
    assert transport.window_of("resend") == 86400.0
    assert transport.window_of("smtp") is None
    assert spec.timeout == 5 + 30 + 30  # a send may try each in turn
    assert spec.key_header == url.KEEP_HEADER
    assert "re_Secret" not in spec.shown
    assert "pw" not in spec.shown.replace("relay", "").replace("backup", "")


def test_a_relay_preset_among_members_sets_the_key_header_for_all() -> None:
    # The plain SMTP member's header is informational; the Resend relay's is not.
    spec = url.parse("roundrobin(smtp+resend://u:p@, smtp://u:p@relay)", {}, concurrency=1)
    assert spec.key_header == "Resend-Idempotency-Key"


def test_split_members_keeps_nested_parentheses_together() -> None:
    assert split_members("a, failover(b, c) ,d") == ["a", "failover(b, c)", "d"]


def test_brevo_key_uuid_is_a_stable_uuid_per_key() -> None:
    assert key_uuid("order-1") == key_uuid("order-1")
    assert key_uuid("order-1") != key_uuid("order-2")
    assert len(key_uuid("order-1")) == 36


def test_every_registered_provider_has_its_module_and_reads_its_own_url() -> None:
    """One line in providers.PROVIDERS and a module named after it are the whole
    registration (docs/ADDING_A_PROVIDER.md): the module reads NAME:// URLs."""
    import importlib

    from mailout.transports import providers

    for name in providers.PROVIDERS:
        module = importlib.import_module(f"mailout.transports.{name}")
        assert callable(module.from_url), name
    assert set(providers.RELAYS) == set(providers.PROVIDERS)  # each has an SMTP relay


def test_a_provider_whose_extra_is_missing_is_a_config_error_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "httpx", None)  # importing it now fails
    monkeypatch.delitem(sys.modules, "mailout.transports.resend", raising=False)
    monkeypatch.delitem(sys.modules, "mailout.transports.http", raising=False)
    with pytest.raises(ConfigError) as caught:
        url.parse("resend://re_key", {}, concurrency=1)
    assert caught.value.setting == "MAILOUT_TRANSPORT"
    assert "pip install 'mailout[http]'" in caught.value.reason
    assert "re_key" not in str(caught.value)
