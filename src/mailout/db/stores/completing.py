"""The completion rules, written once as data: what a finished attempt writes to its
row and to the attempt log. Each store's statement is generated from these tables:
PostgreSQL's ``UPDATE ... FROM jsonb_to_recordset`` (:func:`postgresql_sql`), MySQL's
``UPDATE ... JOIN JSON_TABLE`` (:func:`mysql_sql`) and the one-row SQLAlchemy Core
``UPDATE`` every dialect can run (:func:`row_statement`).

A row is updated only while the attempt's lease token still holds it (a fenced
completion: its worker lost the lease and another has claimed the row); the attempt
is logged either way, because it happened. tests/unit/db/test_completion_rules.py
pins the generated SQL to the text each store ran before the rules were data.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import (
    Boolean,
    Connection,
    Float,
    Integer,
    SmallInteger,
    String,
    bindparam,
    case,
    cast,
    func,
    insert,
    literal,
    true,
    update,
)

from mailout.db.schema import (
    REPLY_TEXT_MAX,
    Timestamp,
    attempt_recipients,
    attempts,
    db_now,
    db_now_plus,
    messages,
)
from mailout.models import Completion, Outcome, Status

LEASE_LOST = "lease lost before completion; row left to its new owner"


class Field(NamedTuple):
    """One value of a completion row, as each statement declares it."""

    pg: str  # its jsonb_to_recordset() type
    mysql: str | None  # its JSON_TABLE type; None: MySQL's statement never reads it
    core: Any = None  # its SQLAlchemy type in the one-row UPDATE; None: untyped
    cast: bool = True  # the Core parameter is CAST to ``core`` (else only typed)


# The completion row (see completion_row), in the order the statements declare it.
FIELDS: dict[str, Field] = {
    "id": Field("bigint", "BIGINT"),
    "token": Field("text", None),
    "status": Field("text", "VARCHAR(16)"),
    "reason": Field("text", "VARCHAR(64)"),
    "reply_code": Field("smallint", "SMALLINT", SmallInteger),
    "reply_text": Field("text", "TEXT"),
    "provider_id": Field("text", "VARCHAR(255)", String),
    "redirected_to": Field("text", "VARCHAR(320)", String),
    "delay": Field("float8", "DOUBLE", Float),
    "uncharge": Field("int", "INT", Integer),
    "unknown": Field("int", None, Integer),
    "sent": Field("bool", "INT", Boolean, cast=False),
    "final": Field("bool", "INT", Boolean, cast=False),
    "logged": Field("bool", None),
    "attempt": Field("int", None),
    "outcome": Field("text", None),
    "stage": Field("text", None),
    "enhanced": Field("text", None),
    "detail": Field("text", None),
    "recipient": Field("text", None),
    "worker": Field("text", None),
    # Typed but not CAST: SQLite would turn CAST(text AS DATETIME) into a number.
    "started_at": Field("timestamptz", None, Timestamp, cast=False),
    "charged": Field("bool", None),
    "settled": Field("jsonb", "LONGTEXT", messages.c.settled.type, cast=False),
    "transport": Field("text", None, String),
}


class Kind(enum.Enum):
    """How a rule computes its column from the old row (``m``) and the batch (``v``)."""

    VALUE = "value"  # v.field
    NULL = "null"  # cleared
    IF_GIVEN = "if_given"  # v.field when v.when is not NULL, else kept
    COALESCE = "coalesce"  # v.field unless NULL, else kept
    NOW_IF = "now_if"  # the database clock when flag v.field is set, else kept
    LATER = "later"  # the clock plus v.field seconds, kept when NULL
    MINUS = "minus"  # the old value less v.field
    PLUS = "plus"  # the old value plus v.field
    FIRST_UNKNOWN = "first_unknown"  # v.field the first time v.when = 1, else kept
    UNKNOWN_VIA = "unknown_via"  # the transport of every unknown outcome, or '*'


class Rule(NamedTuple):
    """What a completion writes to one column of its row."""

    column: str
    kind: Kind
    field: str | None = None
    when: str | None = None  # the field a conditional rule tests
    first: bool = False  # reads a column another rule changes: set before it (MySQL)

    @property
    def inputs(self) -> set[str]:
        return {f for f in (self.field, self.when) if f} | (
            {"unknown"} if self.kind is Kind.UNKNOWN_VIA else set())


# Reply code and text are kept from an earlier attempt unless this one got a reply;
# so are the provider id and the redirect. Times come from the database clock;
# ``delay`` schedules the next attempt; ``uncharge`` gives the attempt back (a pause);
# an unknown outcome counts towards ``unknown_attempts``.
RULES: tuple[Rule, ...] = (
    Rule("status", Kind.VALUE, "status"),
    Rule("reason", Kind.VALUE, "reason"),
    Rule("lease_owner", Kind.NULL),
    Rule("lease_token", Kind.NULL),
    Rule("lease_expires_at", Kind.NULL),
    Rule("last_reply_code", Kind.IF_GIVEN, "reply_code", when="reply_code"),
    Rule("last_reply_text", Kind.IF_GIVEN, "reply_text", when="reply_code"),
    Rule("provider_message_id", Kind.COALESCE, "provider_id"),
    Rule("redirected_to", Kind.COALESCE, "redirected_to"),
    Rule("sent_at", Kind.NOW_IF, "sent"),
    Rule("finished_at", Kind.NOW_IF, "final"),
    Rule("next_attempt_at", Kind.LATER, "delay"),
    Rule("attempts", Kind.MINUS, "uncharge"),
    Rule("unknown_attempts", Kind.PLUS, "unknown"),
    Rule("settled", Kind.COALESCE, "settled"),
    Rule("unknown_since", Kind.FIRST_UNKNOWN, "started_at", when="unknown"),
    Rule("unknown_via", Kind.UNKNOWN_VIA, "transport", first=True),
)

# The attempt log entry: its column and the completion field it takes (None: the
# database clock). DETAIL is replaced by LEASE_LOST when the row was fenced.
ATTEMPT_LOG: tuple[tuple[str, str | None], ...] = (
    ("outbox_id", "id"), ("attempt", "attempt"), ("outcome", "outcome"),
    ("stage", "stage"), ("reply_code", "reply_code"), ("enhanced_code", "enhanced"),
    ("reply_text", "reply_text"), ("detail", "detail"), ("recipient", "recipient"),
    ("worker", "worker"), ("started_at", "started_at"), ("finished_at", None),
    ("charged", "charged"), ("transport", "transport"),
)
DETAIL = "detail"


def completion_row(c: Completion) -> dict[str, Any]:
    """What ``c`` does to its row (and its attempt log entry), as FIELDS' values."""
    return {
        "id": c.id, "token": c.lease_token, "status": c.status.value, "reason": c.row_reason,
        "reply_code": c.reply_code, "reply_text": truncate(c.reply_text),
        "provider_id": c.provider_message_id, "redirected_to": c.redirected_to,
        "delay": c.delay_seconds, "uncharge": int(c.uncharge),
        "unknown": int(c.outcome is Outcome.UNKNOWN and c.logged),
        "sent": c.status is Status.SENT, "final": c.status.is_final, "logged": c.logged,
        "attempt": c.attempt, "outcome": c.outcome.value, "stage": c.stage,
        "enhanced": c.enhanced_code, "detail": truncate(c.detail, 200),
        "recipient": c.recipient, "worker": c.worker, "started_at": c.started_at,
        "charged": not c.uncharge,
        "settled": None if c.settled is None else dict(c.settled),
        "transport": c.transport,
    }


def attempt_row(row: Mapping[str, Any], *, fenced: bool) -> dict[str, Any]:
    """The attempt log entry of completion row ``row`` (without its finish time)."""
    out = {col: row[f] for col, f in ATTEMPT_LOG if f is not None}
    if fenced:
        out[DETAIL] = LEASE_LOST
    return out


class _Sql(NamedTuple):
    """How one dialect writes the rules' pieces."""

    target: str  # prefix of an assigned column
    now: str
    flag: str  # a set flag field, {v}
    later: str  # the clock plus {v} seconds


_PG = _Sql("", "clock_timestamp()", "{v}", "clock_timestamp() + make_interval(secs => {v})")
_MYSQL = _Sql("m.", "UTC_TIMESTAMP(6)", "{v} = 1",
              "TIMESTAMPADD(MICROSECOND, CAST({v} * 1000000 AS SIGNED), UTC_TIMESTAMP(6))")


def _sql_rule(rule: Rule, sql: _Sql) -> str:
    old, new, when = f"m.{rule.column}", f"v.{rule.field}", f"v.{rule.when}"
    values: dict[Kind, Callable[[], str]] = {
        Kind.VALUE: lambda: new,
        Kind.NULL: lambda: "NULL",
        Kind.IF_GIVEN: lambda: f"CASE WHEN {when} IS NULL THEN {old} ELSE {new} END",
        Kind.COALESCE: lambda: f"COALESCE({new}, {old})",
        Kind.NOW_IF: lambda: (f"CASE WHEN {sql.flag.format(v=new)} THEN {sql.now} "
                              f"ELSE {old} END"),
        Kind.LATER: lambda: (f"CASE WHEN {new} IS NULL THEN {old} "
                             f"ELSE {sql.later.format(v=new)} END"),
        Kind.MINUS: lambda: f"{old} - {new}",
        Kind.PLUS: lambda: f"{old} + {new}",
        Kind.FIRST_UNKNOWN: lambda: (f"CASE WHEN {when} = 1 THEN COALESCE({old}, {new}) "
                                     f"ELSE {old} END"),
        Kind.UNKNOWN_VIA: lambda: (f"CASE WHEN v.unknown = 0 THEN {old} "
                                   f"WHEN m.unknown_since IS NULL THEN {new} "
                                   f"WHEN {old} IS DISTINCT FROM {new} THEN '*' "
                                   f"ELSE {old} END"),
    }
    value = values[rule.kind]()
    return f"{sql.target}{rule.column} = {value}"


def postgresql_sql() -> str:
    """PostgreSQL's batch completion: one statement, the batch one JSON parameter
    (``:batch``), so the text and its server-side prepared plan are the same for every
    batch size. The UPDATE applies RULES fenced by the lease token; the attempt log
    joins on its RETURNING to tell fenced rows."""
    columns = ", ".join(f"{name} {f.pg}" for name, f in FIELDS.items())
    sets = ",\n        ".join(_sql_rule(r, _PG) for r in RULES)
    log_columns = ", ".join(col for col, _ in ATTEMPT_LOG)
    log_values = ", ".join(
        f"CASE WHEN done.id IS NULL THEN '{LEASE_LOST}' ELSE v.{f} END" if col == DETAIL
        else _PG.now if f is None else f"v.{f}" for col, f in ATTEMPT_LOG)
    return f"""
WITH v AS (
    SELECT * FROM jsonb_to_recordset(CAST(:batch AS jsonb))
        AS v({columns})
), done AS (
    UPDATE {messages.name} AS m SET
        {sets}
    FROM v
    WHERE m.id = v.id AND m.lease_token = v.token AND m.status = '{Status.SENDING.value}'
    RETURNING m.id
), logged AS (
    INSERT INTO {attempts.name} ({log_columns})
    SELECT {log_values}
    FROM v LEFT JOIN done ON done.id = v.id
    WHERE v.logged
)
SELECT id FROM done
"""  # noqa: S608 - only this module's constants are interpolated; values are bound


# MySQL gives no order to the assignments of a multiple-table UPDATE, so no rule may
# read a column another one changes: a batch with an unknown outcome (whose rules read
# unknown_since) is completed row by row instead (mailout.db.stores.mysql.fits).
MYSQL_RULES = tuple(r for r in RULES if "unknown" not in r.inputs)
MYSQL_FIELDS = tuple(name for name, f in FIELDS.items() if f.mysql is not None)


def mysql_sql() -> str:
    """MySQL's batch completion: the messages joined to ``JSON_TABLE(:batch, ...)``,
    the rows whose outcome is known (MYSQL_RULES)."""
    spec = ", ".join(f"{name} {FIELDS[name].mysql} PATH '$.{name}'" for name in MYSQL_FIELDS)
    sets = ",\n    ".join(_sql_rule(r, _MYSQL) for r in MYSQL_RULES)
    return f"""
UPDATE {messages.name} AS m
JOIN JSON_TABLE(:batch, '$[*]' COLUMNS ({spec})) AS v ON m.id = v.id
SET {sets}
"""  # noqa: S608 - only this module's constants are interpolated; values are bound


def _core_arg(name: str) -> Any:
    field = FIELDS[name]
    # Typed, so that "? IS NULL" means something to PostgreSQL as well. (Booleans are
    # tested with IS TRUE instead: MySQL has no CAST to a boolean.)
    if field.core is None:
        return bindparam(f"p_{name}")
    if not field.cast:
        return bindparam(f"p_{name}", type_=field.core)
    return cast(bindparam(f"p_{name}"), field.core)


def _core_rule(rule: Rule) -> Any:
    old = messages.c[rule.column]
    new: Any = _core_arg(rule.field) if rule.field else None
    when: Any = _core_arg(rule.when) if rule.when else None
    if rule.kind is Kind.VALUE:
        return new
    if rule.kind is Kind.NULL:
        return None
    if rule.kind is Kind.IF_GIVEN:
        return case((when.is_(None), old), else_=new)
    if rule.kind is Kind.COALESCE:
        return func.coalesce(new, old)
    if rule.kind is Kind.NOW_IF:
        return case((new.is_(true()), db_now()), else_=old)
    if rule.kind is Kind.LATER:
        return case((new.is_(None), old), else_=db_now_plus(new))
    if rule.kind is Kind.MINUS:
        return old - new
    if rule.kind is Kind.PLUS:
        return old + new
    if rule.kind is Kind.FIRST_UNKNOWN:
        return case((when == 1, func.coalesce(old, new)), else_=old)
    return case((_core_arg("unknown") == 0, old),
                (messages.c.unknown_since.is_(None), new),
                (old.is_distinct_from(new), literal("*")), else_=old)


@functools.cache
def row_statement() -> Any:
    """RULES for one row, in any dialect, built and compiled once (a statement built per
    row showed in SQLite's completions: docs/capacity.md). Its parameters are FIELDS'
    names with a "p_" prefix: SQLAlchemy reserves column names. Rules marked ``first``
    come first: MySQL applies assignments in order."""
    ordered = sorted(RULES, key=lambda r: not r.first)
    return (
        update(messages)
        .where(messages.c.id == _core_arg("id"), messages.c.lease_token == _core_arg("token"),
               messages.c.status == Status.SENDING.value)
        .ordered_values(*((messages.c[r.column], _core_rule(r)) for r in ordered))
    )


def complete_rows(conn: Connection, batch: Sequence[Completion],
                  rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """One UPDATE per row (row_statement); return the fenced ids. SQLite's way (in
    process: a statement costs microseconds, not a round trip), and any store's for a
    batch naming a row twice, where the order matters."""
    stmt = row_statement()
    fenced: list[int] = []
    log: list[dict[str, Any]] = []
    for c, row in zip(batch, rows, strict=True):
        was_fenced = conn.execute(stmt, {f"p_{k}": v for k, v in row.items()}).rowcount != 1
        if was_fenced:
            fenced.append(c.id)
        if c.logged:
            log.append(attempt_row(row, fenced=was_fenced))
    if log:
        conn.execute(insert(attempts).values(finished_at=db_now()), log)
    return fenced


def log_recipients(conn: Connection, batch: Sequence[Completion]) -> None:
    """Each recipient's outcome, for attempts of messages to several recipients. Logged
    whether or not the row's completion is fenced: the attempt happened."""
    rows = [{"outbox_id": c.id, "attempt": c.attempt, "address": r.address,
             "outcome": r.outcome.value, "reply_code": r.reply_code,
             "enhanced_code": r.enhanced_code, "reply_text": truncate(r.reply_text)}
            for c in batch if c.logged for r in c.recipients]
    if rows:
        conn.execute(insert(attempt_recipients).values(created_at=db_now()), rows)


def truncate(value: str | None, limit: int = REPLY_TEXT_MAX) -> str | None:
    """``value`` cut to ``limit`` and made storable: a server's stray bytes arrive as
    lone surrogates (surrogateescape), and PostgreSQL refuses NUL. Either would fail
    the whole batch, and with it every retry."""
    if value is None:
        return None
    value = value[:limit]
    if not value.isascii():
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value.replace("\x00", "")
