"""Worker settings: read from the environment, overridden by CLI options, validated.

Every setting has one environment variable; a bad value raises
:class:`~mailout.exceptions.ConfigError` naming that variable, at startup.
"""

from __future__ import annotations

import enum
import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mailout.delivery.policy import (
    MAX_AGE_SECONDS,
    Lane,
    QueuePolicy,
    RetryPolicy,
    parse_lanes,
    parse_queue_policies,
)
from mailout.exceptions import ConfigError, InvalidMessage
from mailout.message import addresses
from mailout.message.return_path import RETURN_PATH_SECRET_MIN_CHARS, ReturnPath
from mailout.models import OnUnknown
from mailout.support import envparse, tracing
from mailout.support.logs import LogRecipients, LogSends
from mailout.support.tracing import TraceRecipients
from mailout.transports import url as transport_url
from mailout.transports.url import TransportSpec


class EventLoop(enum.StrEnum):
    """The event loop a worker runs on (``MAILOUT_EVENT_LOOP``)."""

    AUTO = "auto"  # uvloop when it is installed (mailout[uvloop]), else asyncio's own
    ASYNCIO = "asyncio"  # the standard library's loop, whatever is installed
    UVLOOP = "uvloop"  # uvloop, or a ConfigError at startup when it is not installed


def _event_loop(name: str, raw: str) -> EventLoop:
    choice = envparse.choice(EventLoop)(name, raw)
    if choice is EventLoop.UVLOOP and importlib.util.find_spec("uvloop") is None:
        raise ConfigError(name, "uvloop is not installed (pip install 'mailout[uvloop]')")
    return choice



def _address(name: str, raw: str) -> str:
    try:
        return addresses.address(name, raw)
    except InvalidMessage as exc:
        raise ConfigError(name, exc.reason) from None




def _return_path(name: str, raw: str) -> str:
    ReturnPath(raw.strip(), "x" * RETURN_PATH_SECRET_MIN_CHARS)  # the template, now
    try:
        addresses.address(name, raw.strip().replace("{id}", "1"))
    except InvalidMessage as exc:
        raise ConfigError(name, exc.reason) from None
    return raw.strip()


def _lanes(name: str, raw: str) -> str:
    parse_lanes(raw, name)  # validate now, at startup
    return raw


def _policies(name: str, raw: str) -> str:
    parse_queue_policies(raw, QueuePolicy(RetryPolicy(), 3600.0), name)
    return raw


_SECONDS = envparse.seconds  # every float setting here is a duration
# An age limit longer than ten years passed the check and then failed every enqueue.
_MAX_AGE = envparse.number(float, minimum=0, strict=True, maximum=MAX_AGE_SECONDS)

# field -> (environment variable, parser, default)
_SPEC: dict[str, tuple[str, Callable[[str, str], Any], Any]] = {
    "database_url": ("MAILOUT_DATABASE_URL", envparse.text, None),
    "lease_seconds": ("MAILOUT_LEASE_SECONDS", _SECONDS, 120.0),
    "retry_base": ("MAILOUT_RETRY_BASE_SECONDS", _SECONDS, 30.0),
    "retry_cap": ("MAILOUT_RETRY_CAP_SECONDS", _SECONDS, 3600.0),
    "retry_factor": ("MAILOUT_RETRY_FACTOR", envparse.number(float, minimum=1), 2.0),
    "max_attempts": ("MAILOUT_MAX_ATTEMPTS", envparse.number(int, minimum=1), 8),
    "concurrency": ("MAILOUT_CONCURRENCY", envparse.number(int, minimum=1), 10),
    # None: 1 s on PostgreSQL (NOTIFY wakes workers sooner), 0.2 s on SQLite.
    "poll_seconds": ("MAILOUT_POLL_SECONDS", _SECONDS, None),
    "listen": ("MAILOUT_LISTEN", envparse.boolean, True),
    # Under an OpenTelemetry SDK: render and transport child spans of each send span
    # (off: each costs about as much as a tenth of a message's worker CPU).
    "trace_steps": ("MAILOUT_TRACE_STEPS", envparse.boolean, False),
    "trace_recipients": ("MAILOUT_TRACE_RECIPIENTS", envparse.choice(TraceRecipients),
                         TraceRecipients.OFF),
    "trace_recipients_secret": (tracing.SECRET_SETTING, envparse.text, None),
    "lanes": ("MAILOUT_LANES", _lanes, None),
    "queue_policies": ("MAILOUT_QUEUE_POLICIES", _policies, None),
    "max_age": ("MAILOUT_MAX_AGE_SECONDS", _MAX_AGE, 86400.0),
    "pause_seconds": ("MAILOUT_PAUSE_SECONDS", _SECONDS, 30.0),
    "pause_cap": ("MAILOUT_PAUSE_CAP_SECONDS", _SECONDS, 600.0),
    "outage_probe": ("MAILOUT_OUTAGE_PROBE_SECONDS", _SECONDS, 5.0),
    "outage_probe_cap": ("MAILOUT_OUTAGE_PROBE_CAP_SECONDS", _SECONDS, 300.0),
    "outage_alert": ("MAILOUT_OUTAGE_ALERT_SECONDS", _SECONDS, 600.0),
    "shutdown_grace": ("MAILOUT_SHUTDOWN_GRACE_SECONDS", envparse.number(float, minimum=0), 30.0),
    "alert_webhook": ("MAILOUT_ALERT_WEBHOOK", envparse.text, None),
    "on_unknown": ("MAILOUT_ON_UNKNOWN", envparse.choice(OnUnknown), OnUnknown.RESEND),
    "log_recipients": ("MAILOUT_LOG_RECIPIENTS", envparse.choice(LogRecipients),
                       LogRecipients.MASKED),
    "log_sends": ("MAILOUT_LOG_SENDS", envparse.choice(LogSends), LogSends.SUMMARY),
    "event_loop": ("MAILOUT_EVENT_LOOP", _event_loop, EventLoop.AUTO),
    "checks": ("MAILOUT_CHECKS", envparse.text, None),
    "resolvers": ("MAILOUT_RESOLVERS", envparse.text, None),
    "redirect_to": ("MAILOUT_REDIRECT_TO", _address, None),
    "allow_domains": ("MAILOUT_ALLOW_DOMAINS", envparse.text, None),
    "templates": ("MAILOUT_TEMPLATES", envparse.text, "templates"),
    # None: Idempotency-Key on the messages mailout renders, none on messages stored
    # whole (Django's), which go out as their author built them unless this is set.
    "idempotency_header": ("MAILOUT_IDEMPOTENCY_HEADER", envparse.text, None),
    "mail_from": ("MAIL_FROM", envparse.text, None),
    "transport_url": ("MAILOUT_TRANSPORT", envparse.text, None),
    "return_path": ("MAILOUT_RETURN_PATH", _return_path, None),
    "return_path_secret": ("MAILOUT_RETURN_PATH_SECRET", envparse.text, None),
    "suppression": ("MAILOUT_SUPPRESSION", envparse.boolean, True),
}

ENV_VARS = {name: spec[0] for name, spec in _SPEC.items()}


@dataclass(frozen=True)
class Settings:
    """Everything a worker needs. Build it with :func:`load`."""

    database_url: str | None = field(repr=False)  # may hold the database's password
    lease_seconds: float
    retry_base: float
    retry_cap: float
    retry_factor: float
    max_attempts: int
    concurrency: int
    poll_seconds: float | None
    listen: bool
    trace_steps: bool
    trace_recipients: TraceRecipients
    trace_recipients_secret: str | None = field(repr=False)  # the recipient hashes' key
    lanes: str | None
    queue_policies: str | None
    max_age: float
    pause_seconds: float
    pause_cap: float
    outage_probe: float  # first wait before probing a provider in an outage
    outage_probe_cap: float  # the longest wait between probes
    outage_alert: float  # an outage this long fires the "outage" alert
    shutdown_grace: float
    alert_webhook: str | None = field(repr=False)  # a chat webhook's URL is its secret
    on_unknown: OnUnknown
    log_recipients: LogRecipients
    log_sends: LogSends
    event_loop: EventLoop
    checks: str | None
    resolvers: str | None
    redirect_to: str | None
    allow_domains: str | None
    templates: str
    idempotency_header: str | None
    mail_from: str | None
    transport_url: str | None = field(repr=False)  # may hold a password or an API key
    transport: TransportSpec = field(repr=False)  # parsed at load, with its own variables
    return_path: str | None = None  # VERP envelope sender, e.g. bounces+{id}@shop.example
    return_path_secret: str | None = field(default=None, repr=False)  # signs return paths
    suppression: bool = True  # cancel mail to suppressed addresses at send time

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            base_seconds=self.retry_base,
            factor=self.retry_factor,
            cap_seconds=self.retry_cap,
            max_attempts=self.max_attempts,
            # The floor only stops hot loops; it must not exceed a deliberately tiny base.
            min_seconds=min(1.0, self.retry_base),
        )

    def policies(self) -> dict[str, QueuePolicy]:
        """Per-queue overrides from MAILOUT_QUEUE_POLICIES (validated at load)."""
        default = QueuePolicy(self.retry_policy, self.max_age)
        return parse_queue_policies(self.queue_policies or "", default)

    def lane_list(self, queues: Sequence[str] | None = None) -> list[Lane]:
        """The lanes to run: MAILOUT_LANES, else one lane over ``queues`` (all if None)."""
        if self.lanes:
            return parse_lanes(self.lanes)
        return [Lane("default", tuple(queues or ()), self.concurrency)]

    @property
    def templates_dir(self) -> Path:
        return Path(self.templates)


def load(env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from ``env`` (default ``os.environ``), with non-None ``overrides`` on top.

    Raises ConfigError for an unparsable or out-of-range value, a retry cap below
    the base, a pause cap below the pause, an outage probe cap below the probe, an
    unknown or malformed MAILOUT_TRANSPORT (or SMTP_* variable), a lease not longer
    than the transport's timeout (a live worker would lose its lease mid-send), or a
    missing MAIL_FROM.
    """
    env = os.environ if env is None else env
    addresses.allowed_special_domains(env)  # a bad MAILOUT_ALLOW_SPECIAL_DOMAINS stops here
    values: dict[str, Any] = {}
    for name, (var, parse, default) in _SPEC.items():
        given = overrides.get(name)
        if given is not None:
            values[name] = parse(var, str(given)) if isinstance(given, str) else given
            continue
        raw = env.get(var)
        values[name] = parse(var, raw) if raw not in (None, "") else default
    values["transport"] = transport_url.parse(values["transport_url"], env,
                                              concurrency=values["concurrency"])
    settings = Settings(**values)
    _check_relations(settings)
    return settings


def _check_relations(s: Settings) -> None:
    if s.retry_cap < s.retry_base:
        raise ConfigError(
            "MAILOUT_RETRY_CAP_SECONDS", "must not be below MAILOUT_RETRY_BASE_SECONDS"
        )
    if s.pause_cap < s.pause_seconds:
        raise ConfigError("MAILOUT_PAUSE_CAP_SECONDS", "must not be below MAILOUT_PAUSE_SECONDS")
    if s.outage_probe_cap < s.outage_probe:
        raise ConfigError("MAILOUT_OUTAGE_PROBE_CAP_SECONDS",
                          "must not be below MAILOUT_OUTAGE_PROBE_SECONDS")
    if s.lease_seconds <= s.transport.timeout:
        raise ConfigError(
            "MAILOUT_LEASE_SECONDS",
            f"must be longer than {s.transport.timeout_setting} ({s.transport.timeout:g} s), "
            "or a live worker could lose its lease in the middle of a send",
        )
    if s.return_path:
        ReturnPath(s.return_path, s.return_path_secret)  # a missing or short secret stops here
    tracing.recipients_key(s.trace_recipients, s.trace_recipients_secret)  # likewise
    if not s.mail_from:
        raise ConfigError("MAIL_FROM", "is required: the address messages are sent from")
    try:
        addresses.mailbox("MAIL_FROM", s.mail_from)
    except InvalidMessage as exc:
        raise ConfigError("MAIL_FROM", exc.reason) from None
    for name in ("idempotency_header",):
        value = getattr(s, name)
        if value is not None and (not value or any(c in value for c in "\r\n: ")):
            raise ConfigError(ENV_VARS[name], "must be a header name without spaces or colons")
