"""Webhook and ingestion settings, from the environment.

Each provider's endpoint exists only when its secret is set: an unconfigured provider
answers 404, never accepts unauthenticated events. Secrets never appear in ``repr``
or logs.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

from mailout.delivery.policy import setting_seconds
from mailout.exceptions import ConfigError
from mailout.feedback.ingest import (
    DEFAULT_SOFT_BOUNCE_LIMIT,
    DEFAULT_SOFT_BOUNCE_WINDOW,
    Policy,
    ReturnPath,
)
from mailout.webhooks.base import Receiver

DEFAULT_TOLERANCE = 300.0  # seconds a signature timestamp may be off, either way
DEFAULT_SNS_TOLERANCE = 3600.0  # SNS signs at publish time and retries the same copy
DEFAULT_MAX_BYTES = 1_000_000
DEFAULT_RATE_WINDOW = 86400.0
DEFAULT_MIN_SENT = 100
DEFAULT_BOUNCE_RATE = 0.05  # providers start reviewing accounts around 5 % (some 2 %)
DEFAULT_COMPLAINT_RATE = 0.001  # 0.1 %: the figure mailbox providers hold senders to


@dataclass(frozen=True)
class WebhookSettings:
    """Everything the receivers and the ingest step need. Build it with :func:`load`."""

    resend_secret: bytes | None = field(default=None, repr=False)  # decoded whsec_ key
    postmark_auth: str | None = field(default=None, repr=False)  # "user:password"
    ses_topics: frozenset[str] = frozenset()  # TopicArns accepted; empty: SES off
    ses_auto_confirm: bool = True
    sendgrid_key: str | None = field(default=None, repr=False)  # base64 DER or PEM
    mailgun_key: bytes | None = field(default=None, repr=False)
    brevo_auth: str | None = field(default=None, repr=False)  # "user:password"
    brevo_token: str | None = field(default=None, repr=False)  # bearer token
    # /metrics: None answers loopback clients only; set, a Bearer token from anywhere.
    metrics_token: str | None = field(default=None, repr=False)
    tolerance: float = DEFAULT_TOLERANCE
    sns_tolerance: float = DEFAULT_SNS_TOLERANCE
    max_bytes: int = DEFAULT_MAX_BYTES
    policy: Policy = field(default_factory=Policy)
    rate_window: float = DEFAULT_RATE_WINDOW
    rate_min_sent: int = DEFAULT_MIN_SENT
    bounce_rate_alert: float | None = DEFAULT_BOUNCE_RATE
    complaint_rate_alert: float | None = DEFAULT_COMPLAINT_RATE
    alert_webhook: str | None = None
    # Tests only: one more origin (https://host:port) certificates and subscription
    # confirmations may come from, with the CA that signs its TLS certificate.
    sns_test_origin: str | None = None
    sns_test_ca_file: str | None = None

    @property
    def providers(self) -> tuple[str, ...]:
        """The providers whose endpoints are enabled."""
        return tuple(build_receivers(self))


def svix_secret(setting: str, raw: str) -> bytes:
    """A Svix signing secret (``whsec_`` + base64) as key bytes."""
    value = raw.strip()
    value = value.removeprefix("whsec_")
    try:
        key = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(setting, "must be the whsec_... signing secret") from None
    if len(key) < 16:
        raise ConfigError(setting, "is too short to be a signing secret")
    return key


def _credentials(setting: str, raw: str) -> str:
    user, colon, password = raw.partition(":")
    if not colon or not user or len(password) < 8:
        raise ConfigError(setting, "must be user:password with a password of 8+ characters")
    return raw


def _secret(setting: str, raw: str) -> str:
    if len(raw.strip()) < 16:
        raise ConfigError(setting, "must be at least 16 characters")
    return raw.strip()


def _rate(setting: str, raw: str) -> float | None:
    if raw.strip().lower() in ("off", "none", "0"):
        return None
    try:
        value = float(raw.strip().rstrip("%")) / (100 if raw.strip().endswith("%") else 1)
    except ValueError:
        raise ConfigError(setting, f"must be a fraction such as 0.05, 5% or off, got {raw!r}"
                          ) from None
    if not 0 < value < 1:
        raise ConfigError(setting, "must be between 0 and 1 (or a percentage)")
    return value


def _int(setting: str, raw: str, minimum: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(setting, f"must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(setting, f"must be at least {minimum}")
    return value


def _origin(setting: str, raw: str) -> str:
    parts = urlsplit(raw.strip())
    if parts.scheme != "https" or not parts.hostname or parts.path not in ("", "/"):
        raise ConfigError(setting, "must be an https://host:port origin")
    return f"https://{parts.netloc}"


# The providers with a receiver: a new one is a line here and its module,
# mailout.webhooks.NAME, whose from_settings() builds it (docs/ADDING_A_PROVIDER.md).
RECEIVERS: Final = ("resend", "postmark", "ses", "sendgrid", "mailgun", "brevo")


class _ReceiverModule(Protocol):
    def from_settings(self, settings: WebhookSettings) -> Receiver | None:
        """The provider's receiver, or None when its secrets are not set."""
        ...


def build_receivers(settings: WebhookSettings) -> dict[str, Receiver]:
    """A receiver per configured provider, in :data:`RECEIVERS` order."""
    out: dict[str, Receiver] = {}
    for name in RECEIVERS:
        module: _ReceiverModule = importlib.import_module(f"mailout.webhooks.{name}")
        receiver = module.from_settings(settings)
        if receiver is not None:
            out[name] = receiver
    return out


def load(env: Mapping[str, str] | None = None, **overrides: Any) -> WebhookSettings:
    """Settings from ``env`` (default ``os.environ``); keyword overrides win.
    Raises ConfigError naming the variable for a bad value."""
    env = os.environ if env is None else env

    def get(name: str) -> str | None:
        value = env.get(name)
        return value if value not in (None, "") else None

    values: dict[str, Any] = {}
    if (raw := get("MAILOUT_WEBHOOK_RESEND_SECRET")) is not None:
        values["resend_secret"] = svix_secret("MAILOUT_WEBHOOK_RESEND_SECRET", raw)
    if (raw := get("MAILOUT_WEBHOOK_POSTMARK_AUTH")) is not None:
        values["postmark_auth"] = _credentials("MAILOUT_WEBHOOK_POSTMARK_AUTH", raw)
    if (raw := get("MAILOUT_WEBHOOK_SES_TOPICS")) is not None:
        topics = frozenset(t.strip() for t in raw.split(",") if t.strip())
        if not all(t.startswith("arn:aws") and t.count(":") == 5 for t in topics):
            raise ConfigError("MAILOUT_WEBHOOK_SES_TOPICS", "must be comma-separated SNS "
                              "topic ARNs (arn:aws:sns:REGION:ACCOUNT:NAME)")
        values["ses_topics"] = topics
    if (raw := get("MAILOUT_WEBHOOK_SES_AUTO_CONFIRM")) is not None:
        values["ses_auto_confirm"] = raw.strip().lower() in ("1", "true", "yes", "on")
    if (raw := get("MAILOUT_WEBHOOK_SENDGRID_KEY")) is not None:
        values["sendgrid_key"] = raw.strip()
    if (raw := get("MAILOUT_WEBHOOK_MAILGUN_KEY")) is not None:
        values["mailgun_key"] = _secret("MAILOUT_WEBHOOK_MAILGUN_KEY", raw).encode()
    if (raw := get("MAILOUT_WEBHOOK_BREVO_AUTH")) is not None:
        values["brevo_auth"] = _credentials("MAILOUT_WEBHOOK_BREVO_AUTH", raw)
    if (raw := get("MAILOUT_WEBHOOK_BREVO_TOKEN")) is not None:
        values["brevo_token"] = _secret("MAILOUT_WEBHOOK_BREVO_TOKEN", raw)
    if (raw := get("MAILOUT_WEBHOOK_METRICS_TOKEN")) is not None:
        values["metrics_token"] = _secret("MAILOUT_WEBHOOK_METRICS_TOKEN", raw)
    if (raw := get("MAILOUT_WEBHOOK_TOLERANCE")) is not None:
        values["tolerance"] = setting_seconds(raw, "MAILOUT_WEBHOOK_TOLERANCE")
    if (raw := get("MAILOUT_WEBHOOK_MAX_BYTES")) is not None:
        values["max_bytes"] = _int("MAILOUT_WEBHOOK_MAX_BYTES", raw, 1024)
    if (raw := get("MAILOUT_EVENT_RATE_WINDOW")) is not None:
        values["rate_window"] = setting_seconds(raw, "MAILOUT_EVENT_RATE_WINDOW")
    if (raw := get("MAILOUT_EVENT_RATE_MIN_SENT")) is not None:
        values["rate_min_sent"] = _int("MAILOUT_EVENT_RATE_MIN_SENT", raw, 1)
    if (raw := get("MAILOUT_BOUNCE_RATE_ALERT")) is not None:
        values["bounce_rate_alert"] = _rate("MAILOUT_BOUNCE_RATE_ALERT", raw)
    if (raw := get("MAILOUT_COMPLAINT_RATE_ALERT")) is not None:
        values["complaint_rate_alert"] = _rate("MAILOUT_COMPLAINT_RATE_ALERT", raw)
    values["alert_webhook"] = get("MAILOUT_ALERT_WEBHOOK")
    if (raw := get("MAILOUT_SNS_TEST_ORIGIN")) is not None:
        values["sns_test_origin"] = _origin("MAILOUT_SNS_TEST_ORIGIN", raw)
        values["sns_test_ca_file"] = get("MAILOUT_SNS_TEST_CA_FILE")
    values["policy"] = load_policy(env)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return WebhookSettings(**values)


def load_policy(env: Mapping[str, str] | None = None) -> Policy:
    """The ingest policy: ``MAILOUT_RETURN_PATH`` (with ``MAILOUT_RETURN_PATH_SECRET``),
    ``MAILOUT_SOFT_BOUNCE_LIMIT``,
    ``MAILOUT_SOFT_BOUNCE_WINDOW``."""
    env = os.environ if env is None else env
    template = env.get("MAILOUT_RETURN_PATH") or None
    limit = env.get("MAILOUT_SOFT_BOUNCE_LIMIT") or None
    window = env.get("MAILOUT_SOFT_BOUNCE_WINDOW") or None
    return Policy(
        return_path=(ReturnPath(template, env.get("MAILOUT_RETURN_PATH_SECRET"))
                     if template else None),
        soft_bounce_limit=(_int("MAILOUT_SOFT_BOUNCE_LIMIT", limit, 1) if limit
                           else DEFAULT_SOFT_BOUNCE_LIMIT),
        soft_bounce_window=(setting_seconds(window, "MAILOUT_SOFT_BOUNCE_WINDOW") if window
                            else DEFAULT_SOFT_BOUNCE_WINDOW),
    )
