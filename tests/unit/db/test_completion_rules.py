"""The completion rules are data (mailout.db.stores.completing.RULES); each store's
statement is generated from them. These texts are what the three hand-written versions
were before (commit bb74219: outcomes._COMPLETE_PG, mysql_completions._COMPLETE and
outcomes._complete_row_statement), so the generated SQL changes nothing the databases
run: compared with whitespace normalised, the Core statement as compiled."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime

import pytest
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Dialect

from mailout.db.stores import completing
from mailout.models import Completion, Outcome, Status

POSTGRESQL_BEFORE = """
WITH v AS (
    SELECT * FROM jsonb_to_recordset(CAST(:batch AS jsonb))
        AS v(id bigint, token text, status text, reason text, reply_code smallint, reply_text
            text, provider_id text, redirected_to text, delay float8, uncharge int, unknown int,
            sent bool, final bool, logged bool, attempt int, outcome text, stage text, enhanced
            text, detail text, recipient text, worker text, started_at timestamptz, charged
            bool, settled jsonb, transport text)
), done AS (
    UPDATE mailout_messages AS m SET
        status = v.status,
        reason = v.reason,
        lease_owner = NULL,
        lease_token = NULL,
        lease_expires_at = NULL,
        last_reply_code = CASE WHEN v.reply_code IS NULL THEN m.last_reply_code
                               ELSE v.reply_code END,
        last_reply_text = CASE WHEN v.reply_code IS NULL THEN m.last_reply_text
                               ELSE v.reply_text END,
        provider_message_id = COALESCE(v.provider_id, m.provider_message_id),
        redirected_to = COALESCE(v.redirected_to, m.redirected_to),
        sent_at = CASE WHEN v.sent THEN clock_timestamp() ELSE m.sent_at END,
        finished_at = CASE WHEN v.final THEN clock_timestamp() ELSE m.finished_at END,
        next_attempt_at = CASE WHEN v.delay IS NULL THEN m.next_attempt_at
                               ELSE clock_timestamp() + make_interval(secs => v.delay) END,
        attempts = m.attempts - v.uncharge,
        unknown_attempts = m.unknown_attempts + v.unknown,
        settled = COALESCE(v.settled, m.settled),
        unknown_since = CASE WHEN v.unknown = 1
                             THEN COALESCE(m.unknown_since, v.started_at)
                             ELSE m.unknown_since END,
        unknown_via = CASE WHEN v.unknown = 0 THEN m.unknown_via
                           WHEN m.unknown_since IS NULL THEN v.transport
                           WHEN m.unknown_via IS DISTINCT FROM v.transport THEN '*'
                           ELSE m.unknown_via END
    FROM v
    WHERE m.id = v.id AND m.lease_token = v.token AND m.status = 'sending'
    RETURNING m.id
), logged AS (
    INSERT INTO mailout_attempts (outbox_id, attempt, outcome, stage, reply_code,
        enhanced_code, reply_text, detail, recipient, worker, started_at, finished_at,
        charged, transport)
    SELECT v.id, v.attempt, v.outcome, v.stage, v.reply_code, v.enhanced, v.reply_text,
           CASE WHEN done.id IS NULL THEN 'lease lost before completion; row left to its new
               owner' ELSE v.detail END,
           v.recipient, v.worker, v.started_at, clock_timestamp(), v.charged, v.transport
    FROM v LEFT JOIN done ON done.id = v.id
    WHERE v.logged
)
SELECT id FROM done
"""

MYSQL_BEFORE = """
UPDATE mailout_messages AS m
JOIN JSON_TABLE(:batch, '$[*]' COLUMNS (id BIGINT PATH '$.id', status VARCHAR(16) PATH
    '$.status', reason VARCHAR(64) PATH '$.reason', reply_code SMALLINT PATH '$.reply_code',
    reply_text TEXT PATH '$.reply_text', provider_id VARCHAR(255) PATH '$.provider_id',
    redirected_to VARCHAR(320) PATH '$.redirected_to', delay DOUBLE PATH '$.delay', uncharge INT
    PATH '$.uncharge', sent INT PATH '$.sent', final INT PATH '$.final', settled LONGTEXT PATH
    '$.settled')) AS v ON m.id = v.id
SET m.status = v.status,
    m.reason = v.reason,
    m.lease_owner = NULL,
    m.lease_token = NULL,
    m.lease_expires_at = NULL,
    m.last_reply_code = CASE WHEN v.reply_code IS NULL THEN m.last_reply_code
                             ELSE v.reply_code END,
    m.last_reply_text = CASE WHEN v.reply_code IS NULL THEN m.last_reply_text
                             ELSE v.reply_text END,
    m.provider_message_id = COALESCE(v.provider_id, m.provider_message_id),
    m.redirected_to = COALESCE(v.redirected_to, m.redirected_to),
    m.sent_at = CASE WHEN v.sent = 1 THEN UTC_TIMESTAMP(6) ELSE m.sent_at END,
    m.finished_at = CASE WHEN v.final = 1 THEN UTC_TIMESTAMP(6) ELSE m.finished_at END,
    m.next_attempt_at = CASE WHEN v.delay IS NULL THEN m.next_attempt_at
        ELSE TIMESTAMPADD(MICROSECOND, CAST(v.delay * 1000000 AS SIGNED), UTC_TIMESTAMP(6))
        END,
    m.attempts = m.attempts - v.uncharge,
    m.settled = COALESCE(v.settled, m.settled)
"""

CORE_BEFORE = {
    "postgresql": (
    'UPDATE mailout_messages SET unknown_via=CASE WHEN (CAST(%(p_unknown)s '
    'AS INTEGER) = %(param_1)s::INTEGER) THEN mailout_messages.unknown_via '
    'WHEN (mailout_messages.unknown_since IS NULL) THEN CAST(%(p_transport)'
    's AS VARCHAR) WHEN (mailout_messages.unknown_via IS DISTINCT FROM CAST'
    '(%(p_transport)s AS VARCHAR)) THEN %(param_2)s::VARCHAR ELSE mailout_m'
    'essages.unknown_via END, status=%(p_status)s::VARCHAR, reason=%(p_reas'
    'on)s::VARCHAR, lease_owner=%(lease_owner)s::VARCHAR, lease_token=%(lea'
    'se_token)s::VARCHAR, lease_expires_at=%(lease_expires_at)s::TIMESTAMP '
    'WITH TIME ZONE, last_reply_code=CASE WHEN (CAST(%(p_reply_code)s AS SM'
    'ALLINT) IS NULL) THEN mailout_messages.last_reply_code ELSE CAST(%(p_r'
    'eply_code)s AS SMALLINT) END, last_reply_text=CASE WHEN (CAST(%(p_repl'
    'y_code)s AS SMALLINT) IS NULL) THEN mailout_messages.last_reply_text E'
    'LSE %(p_reply_text)s END, provider_message_id=coalesce(CAST(%(p_provid'
    'er_id)s AS VARCHAR), mailout_messages.provider_message_id), redirected'
    '_to=coalesce(CAST(%(p_redirected_to)s AS VARCHAR), mailout_messages.re'
    'directed_to), sent_at=CASE WHEN (%(p_sent)s IS true) THEN clock_timest'
    'amp() ELSE mailout_messages.sent_at END, finished_at=CASE WHEN (%(p_fi'
    'nal)s IS true) THEN clock_timestamp() ELSE mailout_messages.finished_a'
    't END, next_attempt_at=CASE WHEN (CAST(%(p_delay)s AS FLOAT) IS NULL) '
    'THEN mailout_messages.next_attempt_at ELSE (clock_timestamp() + make_i'
    'nterval(secs => CAST(CAST(%(p_delay)s AS FLOAT) AS double precision)))'
    ' END, attempts=(mailout_messages.attempts - CAST(%(p_uncharge)s AS INT'
    'EGER)), unknown_attempts=(mailout_messages.unknown_attempts + CAST(%(p'
    '_unknown)s AS INTEGER)), settled=coalesce(%(p_settled)s::JSONB, mailou'
    't_messages.settled), unknown_since=CASE WHEN (CAST(%(p_unknown)s AS IN'
    'TEGER) = %(param_3)s::INTEGER) THEN coalesce(mailout_messages.unknown_'
    'since, %(p_started_at)s::TIMESTAMP WITH TIME ZONE) ELSE mailout_messag'
    'es.unknown_since END WHERE mailout_messages.id = %(p_id)s::BIGINT AND '
    'mailout_messages.lease_token = %(p_token)s::VARCHAR AND mailout_messag'
    'es.status = %(status_1)s::VARCHAR'
),
    "mysql": (
    'UPDATE mailout_messages SET unknown_via=CASE WHEN (CAST(%s AS SIGNED I'
    'NTEGER) = %s) THEN mailout_messages.unknown_via WHEN (mailout_messages'
    '.unknown_since IS NULL) THEN CAST(%s AS CHAR) WHEN (NOT (mailout_messa'
    'ges.unknown_via <=> CAST(%s AS CHAR))) THEN %s ELSE mailout_messages.u'
    'nknown_via END, status=%s, reason=%s, lease_owner=%s, lease_token=%s, '
    'lease_expires_at=%s, last_reply_code=CASE WHEN (CAST(%s AS SIGNED INTE'
    'GER) IS NULL) THEN mailout_messages.last_reply_code ELSE CAST(%s AS SI'
    'GNED INTEGER) END, last_reply_text=CASE WHEN (CAST(%s AS SIGNED INTEGE'
    'R) IS NULL) THEN mailout_messages.last_reply_text ELSE %s END, provide'
    'r_message_id=coalesce(CAST(%s AS CHAR), mailout_messages.provider_mess'
    'age_id), redirected_to=coalesce(CAST(%s AS CHAR), mailout_messages.red'
    'irected_to), sent_at=CASE WHEN (%s IS true) THEN UTC_TIMESTAMP(6) ELSE'
    ' mailout_messages.sent_at END, finished_at=CASE WHEN (%s IS true) THEN'
    ' UTC_TIMESTAMP(6) ELSE mailout_messages.finished_at END, next_attempt_'
    'at=CASE WHEN (%s IS NULL) THEN mailout_messages.next_attempt_at ELSE T'
    'IMESTAMPADD(MICROSECOND, CAST(%s * 1000000 AS SIGNED), UTC_TIMESTAMP(6'
    ')) END, attempts=(mailout_messages.attempts - CAST(%s AS SIGNED INTEGE'
    'R)), unknown_attempts=(mailout_messages.unknown_attempts + CAST(%s AS '
    'SIGNED INTEGER)), settled=coalesce(%s, mailout_messages.settled), unkn'
    'own_since=CASE WHEN (CAST(%s AS SIGNED INTEGER) = %s) THEN coalesce(ma'
    'ilout_messages.unknown_since, %s) ELSE mailout_messages.unknown_since '
    'END WHERE mailout_messages.id = %s AND mailout_messages.lease_token = '
    '%s AND mailout_messages.status = %s'
),
    "sqlite": (
    'UPDATE mailout_messages SET unknown_via=CASE WHEN (CAST(? AS INTEGER) '
    '= ?) THEN mailout_messages.unknown_via WHEN (mailout_messages.unknown_'
    'since IS NULL) THEN CAST(? AS VARCHAR) WHEN (mailout_messages.unknown_'
    'via IS NOT CAST(? AS VARCHAR)) THEN ? ELSE mailout_messages.unknown_vi'
    'a END, status=?, reason=?, lease_owner=?, lease_token=?, lease_expires'
    '_at=?, last_reply_code=CASE WHEN (CAST(? AS SMALLINT) IS NULL) THEN ma'
    'ilout_messages.last_reply_code ELSE CAST(? AS SMALLINT) END, last_repl'
    'y_text=CASE WHEN (CAST(? AS SMALLINT) IS NULL) THEN mailout_messages.l'
    'ast_reply_text ELSE ? END, provider_message_id=coalesce(CAST(? AS VARC'
    'HAR), mailout_messages.provider_message_id), redirected_to=coalesce(CA'
    'ST(? AS VARCHAR), mailout_messages.redirected_to), sent_at=CASE WHEN ('
    "? IS 1) THEN strftime('%Y-%m-%d %H:%M:%f000', 'now') ELSE mailout_mess"
    "ages.sent_at END, finished_at=CASE WHEN (? IS 1) THEN strftime('%Y-%m-"
    "%d %H:%M:%f000', 'now') ELSE mailout_messages.finished_at END, next_at"
    'tempt_at=CASE WHEN (CAST(? AS FLOAT) IS NULL) THEN mailout_messages.ne'
    "xt_attempt_at ELSE strftime('%Y-%m-%d %H:%M:%f000', 'now', printf('%+."
    "3f seconds', CAST(? AS FLOAT))) END, attempts=(mailout_messages.attemp"
    'ts - CAST(? AS INTEGER)), unknown_attempts=(mailout_messages.unknown_a'
    'ttempts + CAST(? AS INTEGER)), settled=coalesce(?, mailout_messages.se'
    'ttled), unknown_since=CASE WHEN (CAST(? AS INTEGER) = ?) THEN coalesce'
    '(mailout_messages.unknown_since, ?) ELSE mailout_messages.unknown_sinc'
    'e END WHERE mailout_messages.id = ? AND mailout_messages.lease_token ='
    ' ? AND mailout_messages.status = ?'
),
}


def _normalised(sql: str) -> str:
    return " ".join(sql.split())


def test_the_postgresql_batch_completion_is_the_statement_it_was() -> None:
    assert _normalised(completing.postgresql_sql()) == _normalised(POSTGRESQL_BEFORE)


def test_the_mysql_batch_completion_is_the_statement_it_was() -> None:
    assert _normalised(completing.mysql_sql()) == _normalised(MYSQL_BEFORE)


@pytest.mark.parametrize("dialect", [postgresql.dialect(), mysql.dialect(), sqlite.dialect()],
                         ids=lambda d: d.name)
def test_the_one_row_completion_compiles_as_it_did(dialect: Dialect) -> None:
    with warnings.catch_warnings():
        # MySQL has no CAST to FLOAT; SQLAlchemy says so and leaves the value as it is.
        warnings.filterwarnings("ignore", "Datatype FLOAT does not support CAST")
        compiled = str(completing.row_statement().compile(dialect=dialect))
    assert compiled == CORE_BEFORE[dialect.name]


def test_mysql_leaves_out_exactly_the_rules_that_read_an_unknown_outcome() -> None:
    left_out = {r.column for r in completing.RULES} - {
        r.column for r in completing.MYSQL_RULES}
    assert left_out == {"unknown_attempts", "unknown_since", "unknown_via"}


def test_a_completion_row_carries_every_field_the_statements_declare() -> None:
    c = Completion(id=1, lease_token="t", attempt=1, outcome=Outcome.SENT, status=Status.SENT,
                   started_at=datetime(2026, 1, 1, tzinfo=UTC), worker="w",
                   recipient="a@example.com")
    assert list(completing.completion_row(c)) == list(completing.FIELDS)


def test_every_rule_and_log_column_reads_a_declared_field() -> None:
    read = {f for r in completing.RULES for f in r.inputs}
    read |= {f for _, f in completing.ATTEMPT_LOG if f is not None}
    assert read <= set(completing.FIELDS)
