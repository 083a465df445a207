"""The worker's mail settings taken from Django's, for ``manage.py mailout``.

A Django project configures mail once, for Django: ``DEFAULT_FROM_EMAIL``, and the
SMTP server in ``EMAIL_HOST``, ``EMAIL_PORT``, ``EMAIL_HOST_USER``,
``EMAIL_HOST_PASSWORD``, ``EMAIL_USE_TLS``, ``EMAIL_USE_SSL`` and ``EMAIL_TIMEOUT``
(from Django 6.1, in the ``OPTIONS`` of an SMTP mailer in ``MAILERS``).
:func:`worker_environment` turns them into the variables the worker reads
(``MAIL_FROM``, ``SMTP_*``), so that the worker connects where Django's own SMTP
backend would, as Django would.

The environment still wins. ``MAIL_FROM`` wins over ``DEFAULT_FROM_EMAIL``. An
environment that names a server (``MAILOUT_TRANSPORT``, or any of ``SMTP_HOST``,
``SMTP_PORT``, ``SMTP_USER``, ``SMTP_PASS``, ``SMTP_TLS``) describes it whole: none of
Django's SMTP settings are mixed in, since Django's port 25 without TLS (its
defaults) must never join an ``SMTP_HOST`` meant to be reached over STARTTLS. The
other ``SMTP_*`` variables (``SMTP_TIMEOUT``, ``SMTP_CA_FILE``...) each win over
what Django's settings give for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from mailout.exceptions import ConfigError, InvalidMessage
from mailout.message import addresses
from mailout.transports.smtp.settings import IMPLICIT_TLS_PORT, TlsMode

SMTP_BACKEND: Final = "django.core.mail.backends.smtp.EmailBackend"
# Names the MAILERS entry the worker takes its server from, when several could be.
MAILER_SETTING: Final = "MAILOUT_MAILER"
FROM_VARIABLE: Final = "MAIL_FROM"
# Variables that name a server: when the environment sets one, it describes the server.
SERVER_VARIABLES: Final = ("MAILOUT_TRANSPORT", "SMTP_HOST", "SMTP_PORT", "SMTP_USER",
                           "SMTP_PASS", "SMTP_TLS")
# Django 6.1's default port of a mailer by its security (its EMAIL_PORT was 25 always).
_MAILER_PORTS: Final = {TlsMode.IMPLICIT: IMPLICIT_TLS_PORT, TlsMode.STARTTLS: 587,
                        TlsMode.NONE: 25}


@dataclass(frozen=True)
class DjangoSmtp:
    """Where Django's SMTP backend connects. ``password`` never shows in ``repr``."""

    host: str
    port: int
    tls: TlsMode
    username: str = ""
    password: str = field(default="", repr=False)
    timeout: float | None = None  # None: Django waits forever; the worker keeps its own

    def variables(self) -> dict[str, str]:
        """The ``SMTP_*`` variables that say the same."""
        found = {"SMTP_HOST": self.host, "SMTP_PORT": str(self.port), "SMTP_TLS": self.tls.value}
        if self.username and self.password:  # Django logs in only with both
            found |= {"SMTP_USER": self.username, "SMTP_PASS": self.password}
        if self.timeout is not None:
            found["SMTP_TIMEOUT"] = f"{self.timeout:g}"
        return found


def worker_environment(settings: Any, env: Mapping[str, str], *,
                       has_mailers: bool) -> dict[str, str]:
    """The variables to add to ``env`` for a mailout command run by ``manage.py``: what
    Django's ``settings`` say and ``env`` does not. ``has_mailers``: this Django has
    the ``MAILERS`` setting (6.1+), which replaces the ``EMAIL_*`` ones when set.

    Raises ConfigError naming the Django setting that cannot be followed.
    """
    found: dict[str, str] = {}
    sender = getattr(settings, "DEFAULT_FROM_EMAIL", "")
    if sender and not env.get(FROM_VARIABLE):
        found[FROM_VARIABLE] = str(sender)
    if not any(env.get(name) for name in SERVER_VARIABLES):
        smtp = django_smtp(settings, has_mailers=has_mailers)
        if smtp is not None:
            found |= {k: v for k, v in smtp.variables().items() if not env.get(k)}
    return found


def check_sender(settings: Any) -> None:
    """Refuse a ``DEFAULT_FROM_EMAIL`` the worker cannot send from, by that name (the
    worker would name ``MAIL_FROM``, which the project never set)."""
    try:
        addresses.mailbox("DEFAULT_FROM_EMAIL", getattr(settings, "DEFAULT_FROM_EMAIL", ""))
    except InvalidMessage as exc:
        raise ConfigError("DEFAULT_FROM_EMAIL", f"{exc.reason} (or set {FROM_VARIABLE})") \
            from None


def django_smtp(settings: Any, *, has_mailers: bool) -> DjangoSmtp | None:
    """Django's SMTP server: from ``MAILERS`` when this Django has it and the project
    sets it (None when no mailer there is Django's SMTP backend), else ``EMAIL_*``.
    Django 6.1 refuses to read an ``EMAIL_*`` setting once ``MAILERS`` is set."""
    mailers = getattr(settings, "MAILERS", None) if has_mailers else None
    if mailers:
        return from_mailers(mailers, getattr(settings, MAILER_SETTING, None))
    return from_email_settings(settings)


def from_email_settings(settings: Any) -> DjangoSmtp:
    """The ``EMAIL_*`` settings, with Django's defaults for those not set."""
    options = {key: getattr(settings, name, default)
               for key, (name, default) in _EMAIL_SETTINGS.items()}
    return _smtp(options, lambda key: _EMAIL_SETTINGS[key][0], mailer=False)


def from_mailers(mailers: Mapping[str, Any], chosen: str | None) -> DjangoSmtp | None:
    """The mailer ``chosen`` (``MAILOUT_MAILER``), else the one mailer that is Django's
    SMTP backend (a mailer without ``BACKEND`` is); None when there is none."""
    if chosen is not None:
        if chosen not in mailers:
            raise ConfigError(MAILER_SETTING, f"{chosen!r} is not in MAILERS")
        if not _is_smtp(mailers[chosen]):
            raise ConfigError(MAILER_SETTING, f"MAILERS[{chosen!r}] is not Django's SMTP "
                              f"backend ({SMTP_BACKEND})")
        alias = chosen
    else:
        smtp = sorted(name for name, conf in mailers.items() if _is_smtp(conf))
        if not smtp:
            return None
        if len(smtp) > 1:
            raise ConfigError(MAILER_SETTING, f"is needed: MAILERS has {len(smtp)} SMTP "
                              f"mailers ({', '.join(smtp)}); name the worker's")
        alias = smtp[0]
    options = dict(mailers[alias].get("OPTIONS") or {})
    if not options.get("host"):
        raise ConfigError(f"MAILERS[{alias!r}]", "has no OPTIONS 'host' (Django's SMTP "
                          "backend needs one)")
    return _smtp(options, lambda key: f"MAILERS[{alias!r}]['OPTIONS'][{key!r}]", mailer=True)


# OPTIONS key of a mailer -> (EMAIL_* setting, Django's default for it)
_EMAIL_SETTINGS: Final[dict[str, tuple[str, Any]]] = {
    "host": ("EMAIL_HOST", "localhost"),
    "port": ("EMAIL_PORT", 25),
    "username": ("EMAIL_HOST_USER", ""),
    "password": ("EMAIL_HOST_PASSWORD", ""),
    "use_tls": ("EMAIL_USE_TLS", False),
    "use_ssl": ("EMAIL_USE_SSL", False),
    "timeout": ("EMAIL_TIMEOUT", None),
    "ssl_certfile": ("EMAIL_SSL_CERTFILE", None),
    "ssl_keyfile": ("EMAIL_SSL_KEYFILE", None),
}


def _is_smtp(conf: Any) -> bool:
    return isinstance(conf, Mapping) and conf.get("BACKEND", SMTP_BACKEND) == SMTP_BACKEND


def _smtp(options: Mapping[str, Any], name: Any, *, mailer: bool) -> DjangoSmtp:
    """A DjangoSmtp from Django's backend options; ``name(key)`` is the setting to blame."""
    for key in ("ssl_certfile", "ssl_keyfile"):
        if options.get(key):
            raise ConfigError(name(key), "is not supported: mailout's SMTP transport "
                              "presents no client certificate")
    if options.get("use_tls") and options.get("use_ssl"):
        raise ConfigError(name("use_tls"), f"and {name('use_ssl')} are both on: Django "
                          "refuses that too; choose one")
    tls = (TlsMode.IMPLICIT if options.get("use_ssl")
           else TlsMode.STARTTLS if options.get("use_tls") else TlsMode.NONE)
    port = options.get("port")
    if port is None and mailer:
        port = _MAILER_PORTS[tls]
    return DjangoSmtp(host=_text(name("host"), options.get("host") or "localhost"),
                      port=_number(name("port"), port, int), tls=tls,
                      username=str(options.get("username") or ""),
                      password=str(options.get("password") or ""),
                      timeout=(None if options.get("timeout") is None
                               else _number(name("timeout"), options["timeout"], float)))


def _text(setting: str, value: Any) -> str:
    text = str(value).strip()
    if not text or any(c in text for c in "\r\n\0"):
        raise ConfigError(setting, f"is not a host name: {value!r}")
    return text


def _number(setting: str, value: Any, kind: type[int] | type[float]) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(setting, f"must be a number, got {value!r}") from None
    if number <= 0:
        raise ConfigError(setting, f"must be positive, got {value!r}")
    return number
