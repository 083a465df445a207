"""Logging: one event per line, as text or JSON lines, and what may appear in a line.

The worker logs sends (queue, key, Message-ID, attempt, outcome, SMTP code, stage,
duration) as a message *and* as structured fields (``extra=``), which the JSON
formatter writes as top-level keys. ``MAILOUT_LOG_SENDS`` says which: ``summary``
(the default) logs every attempt that did not end ``sent`` on a line of its own and
counts the accepted ones into one line per interval; ``each`` logs every attempt.
Every attempt is in ``mailout_attempts`` either way (``mailout trace``).

It never logs passwords, the AUTH exchange, message bodies or template params.
Recipient addresses are logged according to ``MAILOUT_LOG_RECIPIENTS``: ``masked``
(default, ``a***@example.com``), ``full`` or ``off``.

SQL echo (the ``sqlalchemy`` loggers at INFO or DEBUG) prints statement parameters
and rows, which include bodies and addresses: it stays at WARNING here, and is a
database debugging tool that production must never enable.
"""

from __future__ import annotations

import enum
import json
import logging
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Any

from mailout.models import ClaimedMessage, Completion, Outcome
from mailout.support import tracing, visible

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD_ATTRS = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__
) | {"message", "asctime", "taskName"}
_CORE_KEYS = ("time", "level", "logger", "message", "trace_id", "span_id")
# Any address-looking run, international ones included (\w is Unicode-aware): a
# partial match would leave the start of a non-ASCII local part readable.
_ADDRESS = re.compile(r"([\w.!#$%&'*+/=?^`{|}~-]+)@([\w-]+(?:\.[\w-]+)*\.\w{2,})")


class LogFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"


class LogSends(enum.StrEnum):
    """Which finished attempts get a log line of their own (``MAILOUT_LOG_SENDS``)."""

    SUMMARY = "summary"  # all but the accepted ones; those are counted into one line a while
    EACH = "each"  # every attempt, accepted ones included (a line per message sent)


class LogRecipients(enum.StrEnum):
    """How recipient addresses appear in logs (``MAILOUT_LOG_RECIPIENTS``)."""

    MASKED = "masked"  # a***@example.com: enough to tell messages apart, not to contact
    FULL = "full"
    OFF = "off"


def mask_address(address: str) -> str:
    """``alice@example.com`` -> ``a***@example.com``; the domain stays readable.

    Anything without an ``@`` becomes ``***``: it is not an address, and may be worse.
    """
    local, at, domain = address.strip().rpartition("@")
    if not at or not domain:
        return "***"
    local = local.rpartition("<")[2]  # "Ann <ann@example.com>": the address only
    domain = domain.rstrip(">")
    return f"{local[:1]}***@{domain}" if local else f"***@{domain}"


def recipient_for_log(address: str, mode: LogRecipients) -> str | None:
    """The recipient as ``mode`` allows it in a log line; None means leave it out."""
    if mode is LogRecipients.FULL:
        return address
    if mode is LogRecipients.MASKED:
        return mask_address(address)
    return None


def redact_addresses(text: str, mode: LogRecipients = LogRecipients.MASKED) -> str:
    """``text`` with every e-mail address in it masked (or removed) as ``mode`` says.

    For free text that may echo an address, such as an SMTP reply in an alert.
    """
    if mode is LogRecipients.FULL:
        return text
    if mode is LogRecipients.OFF:
        return _ADDRESS.sub("***", text)
    return _ADDRESS.sub(lambda m: mask_address(m.group(0)), text)


class TextFormatter(logging.Formatter):
    """One line per event, with control characters and line breaks in it written out:
    a reply text or an address in a message cannot drive the terminal that tails the
    log, nor forge a line of it. A traceback, which is ours, keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return visible.one_line(super().formatMessage(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, then the ``extra`` fields.

    An extra field that clashes with a core key is written as ``extra_<key>``;
    values that JSON cannot hold are written as their ``str()``. A line logged while
    an OpenTelemetry span is active carries its ``trace_id`` and ``span_id`` (hex).
    """

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        ids = tracing.current_ids()  # the logging call's context: formatting runs in it
        if ids is not None:
            event["trace_id"], event["span_id"] = ids
        for key, value in record.__dict__.items():
            if key in _STANDARD_ATTRS or key.startswith("_"):
                continue
            event[f"extra_{key}" if key in _CORE_KEYS else key] = value
        if record.exc_info:
            event["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            event["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(event, default=str, ensure_ascii=False)


_HANDLER_MARK = "_mailout_handler"


def configure_logging(
    fmt: str | LogFormat = LogFormat.TEXT,
    level: int | str = logging.INFO,
    *,
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Send every log event to ``stream`` (stderr), one line each, as text or JSON.

    Idempotent: calling it again replaces the handler it installed before (and only
    that one). Returns the handler. Raises ValueError for an unknown format.
    """
    kind = LogFormat(str(fmt).lower())
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if kind is LogFormat.JSON else
                         TextFormatter(TEXT_FORMAT))
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(level)
    # SQL echo logs parameters and rows (bodies, addresses): never inherit DEBUG. And
    # aiosmtpd ("mail.log") runs in-process only as the demo's SMTP sink, where its INFO
    # lines echo every SMTP command, addresses included.
    for name in ("sqlalchemy", "mail.log"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return handler


SEND_FORMAT = (
    "send queue=%(queue)s key=%(key)s message_id=%(message_id)s attempt=%(attempt)d "
    "outcome=%(outcome)s code=%(smtp_code)s stage=%(stage)s duration_ms=%(duration_ms).1f"
)


def log_send(
    logger: logging.Logger,
    msg: ClaimedMessage,
    completion: Completion,
    *,
    stage: str,
    seconds: float,
    recipients: LogRecipients = LogRecipients.MASKED,
) -> None:
    """Log one finished send at INFO, as a text line and as ``extra`` fields.

    Only identifiers, codes and timings: never the body, the params or the reply text
    (a reply may quote the address); the recipient only as ``recipients`` allows.
    Costs one level check when INFO is off for ``logger``.
    """
    if not logger.isEnabledFor(logging.INFO):
        return
    fields: dict[str, Any] = {
        "event": "send",
        "outbox_id": msg.id,
        "queue": msg.queue,
        "key": msg.key,
        "message_id": msg.message_id,
        "attempt": msg.attempts,
        "outcome": completion.outcome.value,
        "smtp_code": completion.reply_code,
        "enhanced_code": completion.enhanced_code,
        "stage": stage,
        "duration_ms": round(seconds * 1000, 1),
        "reason": completion.row_reason,
        "provider_message_id": completion.provider_message_id,
    }
    if completion.parked_after_unknown:
        fields["parked_after_unknown"] = True
    text = SEND_FORMAT
    shown = recipient_for_log(completion.recipient, recipients)
    if shown is not None:
        fields["recipient"] = shown
        text += " to=%(recipient)s"
    if completion.reason:
        text += " reason=%(reason)s"
    # The record as logger.info would make it, without its walk up the stack for the
    # caller (findCaller): the caller is always this function, and it is once per send.
    record = logger.makeRecord(logger.name, logging.INFO, __file__, _SEND_LINE, text,
                               (fields,), None, func="log_send", extra=fields)
    logger.handle(record)


_SEND_LINE = log_send.__code__.co_firstlineno


SUMMARY_SECONDS = 10.0  # how often, at most, the accepted sends are summed up in a line


class SendLog:
    """Logs finished attempts as ``mode`` says (see the module docstring).

    One per worker process, shared by its lanes (one event loop: no lock). The summary
    line (``event=send_summary``) says how many sends were accepted since the last one,
    per queue; it is written once ``interval`` seconds have passed since the last (by
    :meth:`add`, or :meth:`tick`, which the worker calls on a timer so that a burst's
    tail is not held back), and by :meth:`flush` when the worker stops; never when
    nothing was sent.
    """

    def __init__(self, logger: logging.Logger, *, mode: LogSends = LogSends.SUMMARY,
                 recipients: LogRecipients = LogRecipients.MASKED,
                 interval: float = SUMMARY_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._mode = mode
        self._recipients = recipients
        self._interval = interval
        self._clock = clock
        self._since = clock()
        self._sent: Counter[str] = Counter()

    @property
    def recipients(self) -> LogRecipients:
        """How this log shows recipient addresses (MAILOUT_LOG_RECIPIENTS)."""
        return self._recipients

    def add(self, msg: ClaimedMessage, completion: Completion, *, stage: str,
            seconds: float) -> None:
        """One finished attempt: a line of its own, or a count towards the summary."""
        if self._mode is LogSends.EACH or completion.outcome is not Outcome.SENT:
            log_send(self._logger, msg, completion, stage=stage, seconds=seconds,
                     recipients=self._recipients)
            return
        self._sent[msg.queue] += 1
        self.tick()

    def tick(self) -> None:
        """Write the summary line if ``interval`` has passed since the last one."""
        if self._clock() - self._since >= self._interval:
            self.flush()

    def flush(self) -> None:
        """Write the summary line now if anything was counted, and start counting anew."""
        now = self._clock()
        sent, self._sent = self._sent, Counter()
        elapsed, self._since = now - self._since, now
        if not sent or not self._logger.isEnabledFor(logging.INFO):
            return
        queues = dict(sorted(sent.items()))
        total = sum(queues.values())
        per_queue = " ".join(f"{queue}={count}" for queue, count in queues.items())
        self._logger.info("sent %d in %.1fs: %s", total, elapsed, per_queue,
                          extra={"event": "send_summary", "sent": total, "queues": queues,
                                 "seconds": round(elapsed, 1)})
