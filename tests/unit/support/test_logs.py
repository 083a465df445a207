"""Log formatting and what a log line may show."""

from __future__ import annotations

import ast
import io
import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

import mailout
from mailout.models import ClaimedMessage, Completion, Outcome, Status
from mailout.support.logs import (
    JsonFormatter,
    LogRecipients,
    LogSends,
    SendLog,
    configure_logging,
    log_send,
    mask_address,
    recipient_for_log,
    redact_addresses,
)


@pytest.mark.parametrize(("address", "masked"), [
    ("alice@example.com", "a***@example.com"),
    ("a@example.com", "a***@example.com"),
    ("Ann.Lee+tag@Mail.Example.org", "A***@Mail.Example.org"),
    ("<bob@example.com>", "b***@example.com"),
    ("Bob Ray <bob@example.com>", "b***@example.com"),
    ("@example.com", "***@example.com"),
    ("not-an-address", "***"),
    ("trailing@", "***"),
    ("", "***"),
])
def test_mask_address(address: str, masked: str) -> None:
    assert mask_address(address) == masked


def test_recipient_for_log_follows_the_setting() -> None:
    assert recipient_for_log("ann@example.com", LogRecipients.MASKED) == "a***@example.com"
    assert recipient_for_log("ann@example.com", LogRecipients.FULL) == "ann@example.com"
    assert recipient_for_log("ann@example.com", LogRecipients.OFF) is None


def test_redact_addresses_in_free_text() -> None:
    reply = "550 5.1.1 <ann@example.com>: unknown; also bob.ray@mail.example.net"
    assert redact_addresses(reply) == (
        "550 5.1.1 <a***@example.com>: unknown; also b***@mail.example.net")
    assert redact_addresses(reply, LogRecipients.OFF) == "550 5.1.1 <***>: unknown; also ***"
    assert redact_addresses(reply, LogRecipients.FULL) == reply
    assert redact_addresses("no address here, 4.2.2 full") == "no address here, 4.2.2 full"


def _record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    logger = logging.getLogger("mailout.test")
    record = logger.makeRecord("mailout.test", logging.WARNING, __file__, 1, msg, args,
                               None, extra=extra)
    return record


def test_json_formatter_writes_core_keys_and_extra_fields_on_one_line() -> None:
    record = _record("sent %s\nsecond line", "x", queue="bulk", attempt=2, code=None)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    event = json.loads(line)
    assert event["level"] == "WARNING"
    assert event["logger"] == "mailout.test"
    assert event["message"] == "sent x\nsecond line"
    assert (event["queue"], event["attempt"], event["code"]) == ("bulk", 2, None)
    assert datetime.fromisoformat(event["time"]).tzinfo is not None
    for standard in ("args", "msg", "levelno", "pathname", "lineno", "process"):
        assert standard not in event


def test_json_formatter_keeps_core_keys_and_stringifies_odd_values() -> None:
    when = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    record = _record("hello", level="mine", time=when, obj=object)
    event = json.loads(JsonFormatter().format(record))
    assert event["level"] == "WARNING"  # the core key wins; the extra is renamed
    assert event["extra_level"] == "mine"
    assert event["extra_time"] == str(when)
    assert event["obj"] == str(object)


def test_json_formatter_includes_the_exception() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.getLogger("x").makeRecord("x", logging.ERROR, __file__, 1, "failed",
                                               (), exc_info)
    event = json.loads(JsonFormatter().format(record))
    assert event["message"] == "failed"
    assert "ValueError: boom" in event["exc_info"]


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {n: logging.getLogger(n).level for n in ("sqlalchemy", "mail.log")}
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(level)
    for name, lvl in levels.items():
        logging.getLogger(name).setLevel(lvl)


@pytest.mark.usefixtures("root_logging")
def test_configure_logging_json_lines_and_idempotent() -> None:
    out = io.StringIO()
    configure_logging("json", logging.INFO, stream=out)
    configure_logging("JSON", "INFO", stream=out)  # replaces its own handler, not doubles
    marked = [h for h in logging.getLogger().handlers if getattr(h, "_mailout_handler", False)]
    assert len(marked) == 1
    logging.getLogger("mailout.worker.runtime").info("hello %s", "there", extra={"queue": "q"})
    logging.getLogger("mailout.worker.runtime").debug("not at INFO")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["message"] == "hello there"
    assert json.loads(lines[0])["queue"] == "q"
    assert logging.getLogger("sqlalchemy").level == logging.WARNING  # SQL echo stays off


@pytest.mark.usefixtures("root_logging")
def test_configure_logging_text_and_bad_format() -> None:
    out = io.StringIO()
    configure_logging("text", logging.DEBUG, stream=out)
    logging.getLogger("mailout.worker.runtime").debug("plain %d", 1)
    assert out.getvalue().rstrip().endswith("DEBUG mailout.worker.runtime plain 1")
    with pytest.raises(ValueError, match="xml"):
        configure_logging("xml")


def _claimed() -> ClaimedMessage:
    now = datetime.now(UTC)
    return ClaimedMessage(
        id=7, key="order-1-confirmation", queue="default", priority=0,
        recipient="ann.lee@example.com", sender=None, template="welcome",
        params={"code": "PARAM-SECRET"}, subject="Hi", text="BODY-SECRET", html=None,
        headers=None, message_id="<abc@shop.example>", attempts=2, unknown_attempts=0,
        created_at=now, expires_at=None, lease_token="t", claimed_at=now, reclaimed=False)


def _completion(outcome: Outcome = Outcome.SENT) -> Completion:
    return Completion(
        id=7, lease_token="t", attempt=2, outcome=outcome, status=Status.SENT,
        started_at=datetime.now(UTC), worker="w", recipient="ann.lee@example.com",
        reply_code=250, enhanced_code="2.0.0", reply_text="2.0.0 OK for ann.lee@example.com",
        provider_message_id="prov-1", stage="body")


@pytest.mark.parametrize(("mode", "shown"), [
    (LogRecipients.MASKED, "a***@example.com"),
    (LogRecipients.FULL, "ann.lee@example.com"),
    (LogRecipients.OFF, None),
])
def test_log_send_fields_and_recipient_setting(
    caplog: pytest.LogCaptureFixture, mode: LogRecipients, shown: str | None
) -> None:
    caplog.set_level(logging.INFO, logger="mailout.worker.runtime")
    log_send(logging.getLogger("mailout.worker.runtime"), _claimed(), _completion(), stage="body",
             seconds=0.0842, recipients=mode)
    (record,) = caplog.records
    fields = record.__dict__
    assert fields["event"] == "send"
    assert (fields["queue"], fields["key"], fields["message_id"]) == (
        "default", "order-1-confirmation", "<abc@shop.example>")
    assert (fields["attempt"], fields["outcome"], fields["smtp_code"]) == (2, "sent", 250)
    assert (fields["stage"], fields["duration_ms"]) == ("body", 84.2)
    assert fields["provider_message_id"] == "prov-1"
    assert fields.get("recipient") == shown
    line = JsonFormatter().format(record)
    for secret in ("BODY-SECRET", "PARAM-SECRET"):
        assert secret not in line
    if mode is not LogRecipients.FULL:
        assert "ann.lee@example.com" not in line  # not even through the reply text
    assert record.getMessage().startswith(
        "send queue=default key=order-1-confirmation message_id=<abc@shop.example> attempt=2 "
        "outcome=sent code=250 stage=body duration_ms=84.2")
    assert ("to=" in record.getMessage()) is (shown is not None)


def test_log_send_names_its_own_place_like_logger_info(caplog: pytest.LogCaptureFixture) -> None:
    # The record is built without Logger.findCaller: it must still say where it came from.
    caplog.set_level(logging.INFO, logger="mailout.worker.runtime")
    log_send(logging.getLogger("mailout.worker.runtime"), _claimed(), _completion(),
             stage="body", seconds=0.01)
    (record,) = caplog.records
    assert (record.funcName, record.filename, record.levelname) == (
        "log_send", "logs.py", "INFO")


def test_log_send_with_info_off_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mailout.worker.runtime")
    log_send(logging.getLogger("mailout.worker.runtime"), _claimed(), _completion(),
             stage="body", seconds=0.01)
    assert caplog.records == []


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _summary_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "send_summary"]


def test_send_log_sums_up_accepted_sends_per_queue_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mailout.worker.runtime")
    clock = _Clock()
    send_log = SendLog(logging.getLogger("mailout.worker.runtime"), interval=10.0, clock=clock)
    for queue in ("default", "default", "critical"):
        send_log.add(replace(_claimed(), queue=queue), _completion(), stage="body", seconds=0.01)
    send_log.tick()  # not 10 s yet: nothing written
    assert caplog.records == []
    clock.now += 10.0
    send_log.add(_claimed(), _completion(), stage="body", seconds=0.01)
    (record,) = caplog.records
    assert record.getMessage() == "sent 4 in 10.0s: critical=1 default=3"
    assert (record.__dict__["sent"], record.__dict__["queues"]) == (
        4, {"critical": 1, "default": 3})
    clock.now += 3.0
    send_log.flush()  # counting started anew after the line
    assert len(_summary_records(caplog)) == 1
    send_log.add(_claimed(), _completion(), stage="body", seconds=0.01)
    clock.now += 1.5
    send_log.flush()  # the worker stopping: what was counted is written at once
    assert [r.getMessage() for r in _summary_records(caplog)][1:] == ["sent 1 in 1.5s: default=1"]


def test_send_log_writes_every_attempt_that_was_not_accepted_on_its_own_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mailout.worker.runtime")
    send_log = SendLog(logging.getLogger("mailout.worker.runtime"), clock=_Clock())
    send_log.add(_claimed(), _completion(Outcome.RETRY), stage="rcpt", seconds=0.01)
    (record,) = caplog.records
    assert (record.__dict__["event"], record.__dict__["outcome"]) == ("send", "retry")
    assert record.__dict__["recipient"] == "a***@example.com"
    send_log.flush()
    assert len(caplog.records) == 1  # nothing was accepted: no summary line


def test_send_log_each_writes_a_line_per_accepted_send_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mailout.worker.runtime")
    send_log = SendLog(logging.getLogger("mailout.worker.runtime"), mode=LogSends.EACH,
                       recipients=LogRecipients.OFF, clock=_Clock())
    send_log.add(_claimed(), _completion(), stage="body", seconds=0.01)
    send_log.flush()
    (record,) = caplog.records
    assert (record.__dict__["event"], record.__dict__["outcome"]) == ("send", "sent")
    assert "recipient" not in record.__dict__


def test_send_log_summary_with_info_off_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mailout.worker.runtime")
    send_log = SendLog(logging.getLogger("mailout.worker.runtime"), clock=_Clock())
    send_log.add(_claimed(), _completion(), stage="body", seconds=0.01)
    send_log.flush()
    assert caplog.records == []


def _source_modules() -> list[tuple[str, ast.Module]]:
    package = Path(mailout.__file__).parent
    return [(str(p.relative_to(package.parent)), ast.parse(p.read_text(encoding="utf-8")))
            for p in sorted(package.rglob("*.py")) if "migrations" not in p.parts]


def test_every_module_logs_under_its_own_name() -> None:
    """``logging.getLogger(__name__)``: a line says which module wrote it, and a
    module's level can be set alone. Only the package's root logger is named."""
    named = []
    for where, tree in _source_modules():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "getLogger" and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value != "mailout"
                    and str(node.args[0].value).startswith("mailout")):
                named.append(f"{where}:{node.lineno} {node.args[0].value}")
    assert named == []


_LEVELS = {"debug", "info", "warning", "error", "exception", "critical", "log"}


def test_every_log_line_names_its_event_in_a_structured_field() -> None:
    """Each ``log.<level>(...)`` passes ``extra={"event": ...}``: in JSON logs every line
    can be selected by what happened, not by parsing its message."""
    missing = []
    for where, tree in _source_modules():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _LEVELS and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "log"):
                continue
            extra = next((k.value for k in node.keywords if k.arg == "extra"), None)
            if not (isinstance(extra, ast.Dict) and any(
                    isinstance(k, ast.Constant) and k.value == "event" for k in extra.keys)):
                missing.append(f"{where}:{node.lineno}")
    assert missing == []
