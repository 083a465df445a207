"""The EHLO name: set by SMTP_EHLO or ?ehlo=, checked for RFC 5321 syntax, and judged
as a fully qualified domain name for ``mailout check``'s warning (issue 39, item 4)."""

from __future__ import annotations

import pytest

from mailout.exceptions import ConfigError
from mailout.transports.smtp.settings import (
    SmtpSettings,
    ehlo_name,
    ehlo_warning,
    from_env,
    from_url,
    is_fqdn,
)


@pytest.mark.parametrize(("name", "fqdn"), [
    ("mail.shop.example.com", True),
    ("mx1.example.co.uk.", True),
    ("home.example.com", True),
    ("localhost", False),
    ("localhost.localdomain", False),
    ("vm", False),  # a bare host name
    ("printer.local", False),
    ("box.lan", False),
    ("192.0.2.1", False),  # a number, not a name
    ("[192.0.2.1]", False),  # an address literal: valid EHLO, but no name
    ("-bad.example.com", False),
])
def test_what_counts_as_a_fully_qualified_name(name: str, fqdn: bool) -> None:
    assert is_fqdn(name) is fqdn
    assert (ehlo_warning(name) is None) is fqdn


def test_smtp_ehlo_and_the_url_parameter_set_the_name() -> None:
    assert from_env({"SMTP_EHLO": "mail.shop.example.com"}, pool_size=1).local_hostname == (
        "mail.shop.example.com")
    from_both = from_url("smtp://relay.example.com?ehlo=out.example.com",
                         {"SMTP_EHLO": "ignored.example.com"}, pool_size=1)
    assert from_both.local_hostname == "out.example.com"  # the URL wins, as for every setting
    assert from_url("smtp://relay.example.com", {}, pool_size=1).local_hostname is None
    literal = from_env({"SMTP_EHLO": "[IPv6:2001:db8::1]"}, pool_size=1)
    assert literal.local_hostname == "[IPv6:2001:db8::1]"


@pytest.mark.parametrize("bad", ["mail example.com", "mail.example.com\r\nMAIL FROM:<x>",
                                 "a_b.example.com", "x" * 64 + ".example.com", "[::1"])
def test_a_name_ehlo_cannot_carry_is_refused_naming_the_setting(bad: str) -> None:
    with pytest.raises(ConfigError, match="SMTP_EHLO"):
        from_env({"SMTP_EHLO": bad}, pool_size=1)


def test_without_a_setting_the_machines_name_is_used() -> None:
    import socket

    assert ehlo_name(SmtpSettings(host="relay.example.com")) == socket.getfqdn()
    assert ehlo_name(SmtpSettings(host="r.example.com", local_hostname="a.example.com")) == (
        "a.example.com")


def test_the_warning_shows_an_odd_name_escaped() -> None:
    warning = ehlo_warning("h\u00e9")
    assert warning is not None
    assert "\u00e9" not in warning  # shown as an escape, never as it came
