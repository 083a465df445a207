"""Table definitions (SQLAlchemy Core) and the SQL helpers that differ per dialect.

The Alembic migrations under ``mailout/db/migrations`` (and Django's, in
``mailout/contrib/django/migrations``) create exactly these tables; tests check that
they agree (tests/integration/db/test_migrations.py,
tests/integration/contrib/django/test_schema_sync.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    TypeDecorator,
    text,
    true,
)
from sqlalchemy.dialects.mysql import DATETIME as MYSQL_DATETIME
from sqlalchemy.dialects.mysql import LONGBLOB
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.expression import FunctionElement

from mailout.models import Status

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# MySQL: InnoDB, and binary comparison as on the other databases (keys and addresses
# are case-sensitive), whatever the database's default collation.
MYSQL_TABLE: Final[dict[str, Any]] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4",
                                  "mysql_collate": "utf8mb4_bin"}

# SQLite only auto-increments an INTEGER PRIMARY KEY; BIGINT would stay NULL.
Id = BigInteger().with_variant(Integer(), "sqlite")
Json = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


class _UtcDatetime(TypeDecorator[datetime]):
    """MySQL's DATETIME(6) holding UTC. The driver would write an aware value's
    digits and drop its zone, so it is converted to UTC first; values come back
    naive UTC, as from SQLite (``mailout.support.timeutil.aware`` reads them)."""

    impl = MYSQL_DATETIME(fsp=6)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            return value.astimezone(UTC).replace(tzinfo=None)
        return value


# MySQL's DATETIME keeps whole seconds unless told otherwise: microseconds keep claim
# order and lease expiry as precise as on the other databases.
Timestamp = DateTime(timezone=True).with_variant(_UtcDatetime(), "mysql")
# The databases whose partial indexes serve claims; MySQL (no partial indexes) gets
# indexes led by the status instead (MYSQL_CLAIM_INDEXES).
_PARTIAL: Final = ("postgresql", "sqlite")

_STATUSES = ", ".join(f"'{s.value}'" for s in Status)
_PENDING = text(f"status = '{Status.PENDING.value}'")
_SENDING = text(f"status = '{Status.SENDING.value}'")
_HAS_PROVIDER_ID = text("provider_message_id IS NOT NULL")
_FINISHED = text("finished_at IS NOT NULL")

messages = Table(
    "mailout_messages",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("idempotency_key", String(255), nullable=False),
    Column("queue", String(64), nullable=False, server_default="default"),
    Column("priority", SmallInteger, nullable=False, server_default="0"),
    Column("status", String(16), nullable=False, server_default=Status.PENDING.value),
    Column("reason", String(64)),  # why a row is failed, dead or cancelled
    Column("recipient", String(320), nullable=False),
    Column("sender", String(320)),  # overrides MAIL_FROM for this message
    Column("template", String(200)),
    Column("params", Json),
    Column("subject", Text),
    Column("body_text", Text),
    Column("body_html", Text),
    Column("headers", Json),
    Column("message_id", String(255), nullable=False),  # RFC 5322 Message-ID, with <>
    Column("schema_version", Integer),
    Column("attempts", Integer, nullable=False, server_default="0"),
    # Attempts whose outcome is unknown (lost reply, lost lease): the message may
    # have been delivered, so a later refusal does not prove it was not.
    Column("unknown_attempts", Integer, nullable=False, server_default="0"),
    Column("next_attempt_at", Timestamp, nullable=False),
    Column("expires_at", Timestamp),
    Column("lease_owner", String(200)),
    Column("lease_token", String(36)),
    Column("lease_expires_at", Timestamp),
    Column("lease_transport", String(64)),  # the transport of the lane holding the lease
    Column("provider_message_id", String(255)),
    Column("last_reply_code", SmallInteger),
    Column("last_reply_text", Text),
    Column("created_at", Timestamp, nullable=False),
    Column("first_attempt_at", Timestamp),
    Column("last_attempt_at", Timestamp),
    Column("sent_at", Timestamp),
    Column("finished_at", Timestamp),
    # The business event this message announces, for send-time staleness checks.
    Column("event_ref", String(255)),
    Column("event_version", String(64)),
    Column("redirected_to", String(320)),  # set when MAILOUT_REDIRECT_TO delivered it
    # Every To/Cc/Bcc/Reply-To mailbox as [display name, address] pairs, when the
    # message has more than one bare To ("recipient" is then the first To address).
    Column("addresses", Json),
    Column("locale", String(35)),  # the template variant asked for (BCP 47: es-MX)
    # SHA-256 over the attachment list (names, types, content hashes), for idempotency
    # conflicts; NULL when the message has none.
    Column("attachment_digest", String(64)),
    # Recipients settled by earlier attempts of a message to several: {address: status}.
    Column("settled", Json),
    # The earliest attempt that may have delivered it, not yet settled, and the transport
    # it went through ("*": several): compared with that transport's idempotency window.
    Column("unknown_since", Timestamp),
    Column("unknown_via", String(64)),
    # The whole message as the enqueuing code built it (Django's EmailMessage.message(),
    # CRLF line ends, its own Message-ID): sent as it is over SMTP. NULL: the worker
    # renders the message from the columns above. LONGBLOB on MySQL (BLOB stops at 64 KB).
    Column("mime", LargeBinary().with_variant(LONGBLOB(), "mysql")),
    # The rows of one ordered enqueue (a Django send_messages call) share this token: a
    # worker starts each one's attempt only after the one before it has finished.
    Column("batch", String(32)),
    # The W3C trace context of the enqueue's create span (OpenTelemetry, when the
    # application has an active span): the worker's send spans link to it.
    Column("traceparent", String(55)),
    Column("tracestate", String(512)),
    CheckConstraint(f"status IN ({_STATUSES})", name="status"),
    CheckConstraint("attempts >= 0", name="attempts"),
    Index("ux_mailout_messages_key", "idempotency_key", unique=True),
    Index("ux_mailout_messages_message_id", "message_id", unique=True),
    # Claiming reads only these partial indexes, so its cost follows the number of
    # live rows, not the millions of finished ones kept for idempotency and tracing.
    # In claim order: a lane over one queue walks the first, a lane over every queue
    # the second, and both stop after LIMIT rows instead of sorting the backlog.
    Index(
        "ix_mailout_messages_due",
        "queue",
        text("priority DESC"),
        "next_attempt_at",
        "id",
        postgresql_where=_PENDING,
        sqlite_where=_PENDING,
    ).ddl_if(dialect=_PARTIAL),  # type: ignore[arg-type]  # a tuple works (DDLIf); the stub says str
    Index(
        "ix_mailout_messages_pending_order",
        text("priority DESC"),
        "next_attempt_at",
        "id",
        postgresql_where=_PENDING,
        sqlite_where=_PENDING,
    ).ddl_if(dialect=_PARTIAL),  # type: ignore[arg-type]  # a tuple works (DDLIf); the stub says str
    Index(
        "ix_mailout_messages_leased",
        "lease_expires_at",
        postgresql_where=_SENDING,
        sqlite_where=_SENDING,
    ).ddl_if(dialect=_PARTIAL),  # type: ignore[arg-type]  # a tuple works (DDLIf); the stub says str
    # Partial, so that an enqueue (NULL in both) does not pay for them.
    Index(
        "ix_mailout_messages_provider_id",
        "provider_message_id",
        postgresql_where=_HAS_PROVIDER_ID,
        sqlite_where=_HAS_PROVIDER_ID,
    ),
    Index(
        "ix_mailout_messages_finished",
        "finished_at",
        postgresql_where=_FINISHED,
        sqlite_where=_FINISHED,
    ),
    Index("ix_mailout_messages_created", "created_at"),
    # The console's message list pages by keyset (id below a cursor) within a filter:
    # these let "the 50 failed rows before id N" stop after 50 index entries, however
    # deep the page and however rare the status.
    Index("ix_mailout_messages_status_id", "status", "id"),
    Index("ix_mailout_messages_queue_id", "queue", "id"),
    Index("ix_mailout_messages_template_id", "template", "id"),
    Index("ix_mailout_messages_recipient_id", "recipient", "id"),
    # MySQL's claim order: the partial indexes above, led by the status instead of
    # filtered on it (an index on the status alone would make a claim read every
    # pending row). Expired leases are found through (status, id): few rows.
    Index("ix_mailout_messages_claim_due", "status", "queue", text("priority DESC"),
          "next_attempt_at", "id").ddl_if(dialect="mysql"),
    Index("ix_mailout_messages_claim_order", "status", text("priority DESC"),
          "next_attempt_at", "id").ddl_if(dialect="mysql"),
    **MYSQL_TABLE,
)

MYSQL_CLAIM_INDEXES = ("ix_mailout_messages_claim_due", "ix_mailout_messages_claim_order")

attempts = Table(
    "mailout_attempts",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column(
        "outbox_id",
        Id,
        ForeignKey("mailout_messages.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("attempt", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("stage", String(16)),
    Column("reply_code", SmallInteger),
    Column("enhanced_code", String(16)),
    Column("reply_text", String(1000)),  # truncated: replies can be long, this is a log
    Column("detail", String(200)),
    Column("recipient", String(320)),  # the address actually used for this attempt
    Column("worker", String(200)),
    Column("started_at", Timestamp, nullable=False),
    Column("finished_at", Timestamp, nullable=False),
    # False for an attempt given back to its message (an outage, a configuration
    # error): it is in the log but does not count against max_attempts.
    Column("charged", Boolean, nullable=False, server_default=true()),
    Column("transport", String(64)),  # the transport (or failover member) it went through
    Index("ix_mailout_attempts_outbox_id", "outbox_id"),
    Index("ix_mailout_attempts_outcome_finished", "outcome", "finished_at"),
    **MYSQL_TABLE,
)

# One row per distinct attachment content, whatever the messages that carry it: the
# same terms-and-conditions PDF on 100,000 invoices is stored once.
attachments = Table(
    "mailout_attachments",
    metadata,
    Column("sha256", String(64), primary_key=True),  # hex digest of the content
    Column("size", BigInteger, nullable=False),
    # LONGBLOB on MySQL: its BLOB stops at 64 KB.
    Column("content", LargeBinary().with_variant(LONGBLOB(), "mysql"), nullable=False),
    Column("created_at", Timestamp, nullable=False),
    **MYSQL_TABLE,
)

# Which message carries which attachment, under which name and type, in order.
message_attachments = Table(
    "mailout_message_attachments",
    metadata,
    Column("outbox_id", Id, ForeignKey("mailout_messages.id", ondelete="CASCADE"),
           primary_key=True),
    Column("position", SmallInteger, primary_key=True, autoincrement=False),
    # No cascade: an attachment row goes only when purge finds nothing refers to it.
    Column("sha256", String(64), ForeignKey("mailout_attachments.sha256"), nullable=False),
    Column("filename", String(255), nullable=False),
    Column("content_type", String(255), nullable=False),
    Column("inline", Boolean, nullable=False),
    Column("cid", String(255)),
    Index("ix_mailout_message_attachments_sha256", "sha256"),
    **MYSQL_TABLE,
)

# Per-recipient outcomes of the attempts of messages to several recipients.
attempt_recipients = Table(
    "mailout_attempt_recipients",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("outbox_id", Id, ForeignKey("mailout_messages.id", ondelete="CASCADE"),
           nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("address", String(320), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("reply_code", SmallInteger),
    Column("enhanced_code", String(16)),
    Column("reply_text", String(1000)),
    Column("created_at", Timestamp, nullable=False),
    Index("ix_mailout_attempt_recipients_outbox_id", "outbox_id"),
    **MYSQL_TABLE,
)

# Operator switches: a paused queue or template stays pending on every worker.
pauses = Table(
    "mailout_pauses",
    metadata,
    Column("kind", String(16), primary_key=True),  # "queue" or "template"
    Column("name", String(200), primary_key=True),
    Column("reason", String(200)),
    Column("created_at", Timestamp, nullable=False),
    CheckConstraint("kind IN ('queue', 'template')", name="kind"),
    **MYSQL_TABLE,
)

# Delivery events reported by providers (webhooks) or by mail (DSN, ARF); see
# mailout.feedback.events. An event that matches no outbox row is kept with outbox_id NULL.
EVENT_TYPES = ("delivered", "bounced", "deferred", "complained", "unsubscribed", "rejected",
               "auth_failure")
_EVENT_TYPES = ", ".join(f"'{t}'" for t in EVENT_TYPES)

events = Table(
    "mailout_events",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("provider", String(16), nullable=False),
    Column("provider_event_id", String(255), nullable=False),  # idempotent ingestion
    Column("type", String(16), nullable=False),
    Column("subtype", String(32)),  # hard/soft for bounces, the feedback type for complaints
    Column("reason", String(32)),  # why a bounce happened: mailout.feedback.bounce_rules.Reason
    Column("recipient", String(320), nullable=False),  # normalised: lower case, no <>
    Column("outbox_id", Id, ForeignKey("mailout_messages.id", ondelete="SET NULL")),
    Column("matched_by", String(16)),  # provider_id, message_id or return_path
    Column("provider_message_id", String(255)),
    Column("message_id", String(255)),
    Column("occurred_at", Timestamp, nullable=False),  # when the provider says it happened
    Column("received_at", Timestamp, nullable=False),
    Column("diagnostic", String(1000)),
    Column("payload", Text),  # the provider's record, capped (feedback.events.PAYLOAD_MAX_BYTES)
    CheckConstraint(f"type IN ({_EVENT_TYPES})", name="type"),
    Index("ux_mailout_events_provider_event", "provider", "provider_event_id", unique=True),
    Index("ix_mailout_events_outbox_id", "outbox_id"),
    Index("ix_mailout_events_recipient", "recipient", "type", "occurred_at"),
    Index("ix_mailout_events_occurred", "occurred_at"),
    **MYSQL_TABLE,
)

# Addresses no mail goes to; a send-time guard cancels mail to them (reason suppressed).
suppressions = Table(
    "mailout_suppressions",
    metadata,
    Column("address", String(320), primary_key=True),  # normalised like events.recipient
    Column("reason", String(32), nullable=False),  # hard_bounce, complaint, unsubscribe...
    Column("event_id", Id, ForeignKey("mailout_events.id", ondelete="SET NULL")),
    Column("detail", String(200)),
    Column("created_by", String(200)),
    Column("created_at", Timestamp, nullable=False),
    **MYSQL_TABLE,
)

# Every addition and removal, with who did it and why: a removal is a decision to mail
# an address that once bounced or complained, and must be accountable.
suppression_log = Table(
    "mailout_suppression_log",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("address", String(320), nullable=False),
    Column("action", String(16), nullable=False),  # added or removed
    Column("reason", String(32)),
    Column("event_id", Id),
    Column("actor", String(200)),
    Column("note", String(500)),
    Column("at", Timestamp, nullable=False),
    CheckConstraint("action IN ('added', 'removed')", name="action"),
    Index("ix_mailout_suppression_log_address", "address"),
    **MYSQL_TABLE,
)

# Signed webhook deliveries already accepted, by their provider-signed nonce: an
# exact replay is refused. Pruned once older than the signature tolerance.
webhook_nonces = Table(
    "mailout_webhook_nonces",
    metadata,
    Column("provider", String(16), primary_key=True),
    Column("nonce", String(255), primary_key=True),
    Column("seen_at", Timestamp, nullable=False),
    Index("ix_mailout_webhook_nonces_seen", "seen_at"),
    **MYSQL_TABLE,
)

# The audit log: one row per operator action (console, CLI or API), who, when, what
# and why. Kept apart from the messages: purging old mail leaves the log whole.
audit = Table(
    "mailout_audit",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("created_at", Timestamp, nullable=False),
    Column("actor", String(200), nullable=False),  # "alice (cli)", "Bob (web, admin)"
    Column("action", String(32), nullable=False),  # an audit.AuditAction value
    Column("target", String(500), nullable=False),  # "messages 4, 7", "queue bulk"...
    Column("reason", String(500)),
    Column("changed", Integer, nullable=False),
    Column("skipped", Integer, nullable=False, server_default="0"),
    **MYSQL_TABLE,
)

# Which messages an audit entry changed, so a message's page can show its history.
# No foreign key to the messages: the entry outlives a purge of the row.
audit_messages = Table(
    "mailout_audit_messages",
    metadata,
    Column("audit_id", Id, ForeignKey("mailout_audit.id", ondelete="CASCADE"),
           primary_key=True),
    Column("outbox_id", Id, primary_key=True),
    Index("ix_mailout_audit_messages_outbox_id", "outbox_id"),
    **MYSQL_TABLE,
)

REPLY_TEXT_MAX = 1000


class db_now(FunctionElement[Any]):
    """The database's current time, as the type the tables store.

    Scheduling uses the database clock so that workers on different machines agree.
    """

    type = Timestamp
    inherit_cache = True


@compiles(db_now)
def _now_default(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"


@compiles(db_now, "postgresql")
def _now_pg(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    # clock_timestamp(), not now(): a long transaction must not see time stand still.
    return "clock_timestamp()"


@compiles(db_now, "sqlite")
def _now_sqlite(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    # The same text layout SQLAlchemy writes for DateTime, so comparisons stay lexical.
    return "strftime('%Y-%m-%d %H:%M:%f000', 'now')"


@compiles(db_now, "mysql")
def _now_mysql(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "UTC_TIMESTAMP(6)"


class db_now_plus(FunctionElement[Any]):
    """The database's current time plus a number of seconds (a bound expression)."""

    type = Timestamp
    inherit_cache = True

    def __init__(self, seconds: ColumnElement[Any]) -> None:
        self.seconds = seconds
        super().__init__(seconds)


@compiles(db_now_plus, "postgresql")
def _plus_pg(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    secs = compiler.process(element.seconds, **kw)
    return f"(clock_timestamp() + make_interval(secs => CAST({secs} AS double precision)))"


@compiles(db_now_plus, "sqlite")
def _plus_sqlite(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    secs = compiler.process(element.seconds, **kw)
    return f"strftime('%Y-%m-%d %H:%M:%f000', 'now', printf('%+.3f seconds', {secs}))"


@compiles(db_now_plus, "mysql")
def _plus_mysql(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    secs = compiler.process(element.seconds, **kw)
    return f"TIMESTAMPADD(MICROSECOND, CAST({secs} * 1000000 AS SIGNED), UTC_TIMESTAMP(6))"


def json_default(value: object) -> str:
    """``json.dumps`` default for batch parameters: a timestamp travels as ISO 8601,
    which PostgreSQL's jsonb_to_recordset() reads back into a timestamptz column."""
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot send {type(value).__name__} as JSON")
