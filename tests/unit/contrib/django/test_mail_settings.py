"""Django's mail settings become the worker's variables; the environment still wins.

Settings objects carry Django's own defaults (``django.conf.global_settings``) plus
what a project sets. Django 6.1's ``MAILERS`` cannot be installed next to this
Python (Django 6 needs 3.12), so its rules are taken from Django's documentation
(docs/howto/mailers-migration.txt): ``OPTIONS`` keys, a missing ``BACKEND`` meaning the
SMTP backend, the default port by security, and ``EMAIL_*`` refusing to be read once
``MAILERS`` is set.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.conf import global_settings

from mailout.contrib.django.mail_settings import (
    DjangoSmtp,
    check_sender,
    worker_environment,
)
from mailout.exceptions import ConfigError
from mailout.transports.smtp.settings import TlsMode

SMTP = "django.core.mail.backends.smtp.EmailBackend"
QUEUE = {"BACKEND": "mailout.contrib.django.EmailBackend"}
SENDER = "Shop <shop@example.com>"


def django_settings(**project: Any) -> SimpleNamespace:
    defaults = {name: getattr(global_settings, name) for name in dir(global_settings)
                if name.isupper()}
    return SimpleNamespace(**{**defaults, **project})


class MailersSettings:
    """Django 6.1's settings once MAILERS is set: an EMAIL_* setting cannot be read."""

    def __init__(self, **project: Any) -> None:
        self.__dict__.update(DEFAULT_FROM_EMAIL=SENDER, **project)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("EMAIL_"):
            raise AttributeError(f"The {name} setting is not available when MAILERS is defined")
        raise AttributeError(name)


def variables(settings: Any, env: dict[str, str] | None = None, *,
              has_mailers: bool = False) -> dict[str, str]:
    return worker_environment(settings, env or {}, has_mailers=has_mailers)


def test_djangos_defaults_are_what_djangos_smtp_backend_does() -> None:
    assert variables(django_settings()) == {
        "MAIL_FROM": "webmaster@localhost", "SMTP_HOST": "localhost", "SMTP_PORT": "25",
        "SMTP_TLS": "none"}


@pytest.mark.parametrize(("project", "expected"), [
    ({"EMAIL_HOST": "smtp.example.com", "EMAIL_PORT": 587, "EMAIL_USE_TLS": True,
      "EMAIL_HOST_USER": "shop", "EMAIL_HOST_PASSWORD": "pw", "EMAIL_TIMEOUT": 20},
     {"SMTP_HOST": "smtp.example.com", "SMTP_PORT": "587", "SMTP_TLS": "starttls",
      "SMTP_USER": "shop", "SMTP_PASS": "pw", "SMTP_TIMEOUT": "20"}),
    ({"EMAIL_HOST": "smtp.example.com", "EMAIL_PORT": 465, "EMAIL_USE_SSL": True,
      "EMAIL_TIMEOUT": 7.5},
     {"SMTP_HOST": "smtp.example.com", "SMTP_PORT": "465", "SMTP_TLS": "implicit",
      "SMTP_TIMEOUT": "7.5"}),
    # Django logs in only with both a user and a password.
    ({"EMAIL_HOST_USER": "shop"},
     {"SMTP_HOST": "localhost", "SMTP_PORT": "25", "SMTP_TLS": "none"}),
    # EMAIL_PORT stays 25 with TLS on, as in Django before MAILERS.
    ({"EMAIL_USE_TLS": True},
     {"SMTP_HOST": "localhost", "SMTP_PORT": "25", "SMTP_TLS": "starttls"}),
])
def test_the_email_settings_become_smtp_variables(project: dict[str, Any],
                                                  expected: dict[str, str]) -> None:
    found = variables(django_settings(DEFAULT_FROM_EMAIL=SENDER, **project))
    assert found == {"MAIL_FROM": SENDER, **expected}


@pytest.mark.parametrize(("project", "blamed"), [
    ({"EMAIL_USE_TLS": True, "EMAIL_USE_SSL": True}, "EMAIL_USE_TLS"),
    ({"EMAIL_SSL_CERTFILE": "/etc/client.pem"}, "EMAIL_SSL_CERTFILE"),
    ({"EMAIL_SSL_KEYFILE": "/etc/client.key"}, "EMAIL_SSL_KEYFILE"),
    ({"EMAIL_PORT": "smtp"}, "EMAIL_PORT"),
    ({"EMAIL_TIMEOUT": 0}, "EMAIL_TIMEOUT"),
    ({"EMAIL_HOST": "smtp.example.com\r\nRSET"}, "EMAIL_HOST"),
])
def test_a_setting_the_worker_cannot_follow_is_named(project: dict[str, Any],
                                                     blamed: str) -> None:
    with pytest.raises(ConfigError) as raised:
        variables(django_settings(EMAIL_HOST_PASSWORD="pw-never-shown", **project))
    assert raised.value.setting == blamed
    assert "pw-never-shown" not in str(raised.value)


def test_mail_from_in_the_environment_wins_over_default_from_email() -> None:
    found = variables(django_settings(DEFAULT_FROM_EMAIL=SENDER),
                      {"MAIL_FROM": "ops@example.com"})
    assert "MAIL_FROM" not in found
    assert found["SMTP_HOST"] == "localhost"


@pytest.mark.parametrize("name", ["MAILOUT_TRANSPORT", "SMTP_HOST", "SMTP_PORT", "SMTP_USER",
                                  "SMTP_PASS", "SMTP_TLS"])
def test_an_environment_that_names_a_server_describes_it_whole(name: str) -> None:
    project = django_settings(DEFAULT_FROM_EMAIL=SENDER, EMAIL_HOST="smtp.example.com",
                              EMAIL_HOST_USER="shop", EMAIL_HOST_PASSWORD="pw")
    assert variables(project, {name: "anything"}) == {"MAIL_FROM": SENDER}


def test_other_smtp_variables_win_one_by_one() -> None:
    project = django_settings(EMAIL_HOST="smtp.example.com", EMAIL_TIMEOUT=20)
    found = variables(project, {"SMTP_TIMEOUT": "5", "SMTP_CA_FILE": "/ca.pem"})
    assert "SMTP_TIMEOUT" not in found
    assert found["SMTP_HOST"] == "smtp.example.com"


@pytest.mark.parametrize(("options", "port", "tls"), [
    ({"host": "smtp.example.com", "use_tls": True}, "587", "starttls"),
    ({"host": "smtp.example.com", "use_ssl": True}, "465", "implicit"),
    ({"host": "smtp.example.com"}, "25", "none"),
    ({"host": "smtp.example.com", "port": 2525, "use_tls": True}, "2525", "starttls"),
])
def test_the_smtp_mailer_of_mailers_is_the_workers_server(options: dict[str, Any], port: str,
                                                          tls: str) -> None:
    project = MailersSettings(MAILERS={"default": QUEUE, "smtp": {"BACKEND": SMTP,
                                                                  "OPTIONS": options}})
    found = variables(project, has_mailers=True)
    assert found == {"MAIL_FROM": SENDER, "SMTP_HOST": "smtp.example.com", "SMTP_PORT": port,
                     "SMTP_TLS": tls}


def test_a_mailer_without_a_backend_is_djangos_smtp_backend() -> None:
    project = MailersSettings(MAILERS={"default": QUEUE, "relay": {"OPTIONS": {
        "host": "relay.example.com", "username": "shop", "password": "pw", "timeout": 9}}})
    found = variables(project, has_mailers=True)
    assert (found["SMTP_HOST"], found["SMTP_USER"], found["SMTP_PASS"],
            found["SMTP_TIMEOUT"]) == ("relay.example.com", "shop", "pw", "9")


def test_mailout_mailer_chooses_among_several_smtp_mailers() -> None:
    mailers = {"default": QUEUE,
               "a": {"BACKEND": SMTP, "OPTIONS": {"host": "a.example.com"}},
               "b": {"BACKEND": SMTP, "OPTIONS": {"host": "b.example.com"}}}
    with pytest.raises(ConfigError, match=r"2 SMTP mailers \(a, b\)") as raised:
        variables(MailersSettings(MAILERS=mailers), has_mailers=True)
    assert raised.value.setting == "MAILOUT_MAILER"
    chosen = MailersSettings(MAILERS=mailers, MAILOUT_MAILER="b")
    assert variables(chosen, has_mailers=True)["SMTP_HOST"] == "b.example.com"


@pytest.mark.parametrize(("mailers", "chosen", "blamed"), [
    ({"default": QUEUE}, "default", "MAILOUT_MAILER"),
    ({"default": QUEUE}, "nowhere", "MAILOUT_MAILER"),
    ({"default": QUEUE, "smtp": {"BACKEND": SMTP}}, None, "MAILERS['smtp']"),
    ({"smtp": {"OPTIONS": {"host": "h", "use_tls": True, "use_ssl": True}}}, None,
     "MAILERS['smtp']['OPTIONS']['use_tls']"),
])
def test_a_mailers_setting_the_worker_cannot_follow_is_named(
    mailers: dict[str, Any], chosen: str | None, blamed: str,
) -> None:
    project = MailersSettings(MAILERS=mailers, **({"MAILOUT_MAILER": chosen} if chosen else {}))
    with pytest.raises(ConfigError) as raised:
        variables(project, has_mailers=True)
    assert raised.value.setting == blamed


def test_without_an_smtp_mailer_django_names_no_server() -> None:
    project = MailersSettings(MAILERS={"default": QUEUE})
    assert variables(project, has_mailers=True) == {"MAIL_FROM": SENDER}


def test_mailers_is_ignored_by_a_django_that_has_none() -> None:
    project = django_settings(DEFAULT_FROM_EMAIL=SENDER, EMAIL_HOST="smtp.example.com",
                              MAILERS={"smtp": {"OPTIONS": {"host": "other.example.com"}}})
    assert variables(project)["SMTP_HOST"] == "smtp.example.com"


def test_the_password_never_shows_in_a_repr() -> None:
    smtp = DjangoSmtp(host="h", port=25, tls=TlsMode.NONE, username="u", password="pw-x")
    assert "pw-x" not in repr(smtp)


def test_a_sender_the_worker_cannot_use_is_blamed_on_default_from_email() -> None:
    check_sender(django_settings(DEFAULT_FROM_EMAIL=SENDER))
    with pytest.raises(ConfigError) as raised:
        check_sender(django_settings(DEFAULT_FROM_EMAIL="not an address"))
    assert raised.value.setting == "DEFAULT_FROM_EMAIL"
    assert "MAIL_FROM" in raised.value.reason
