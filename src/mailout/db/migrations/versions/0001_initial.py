"""The outbox and its attempt log.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME
from sqlalchemy.dialects.postgresql import JSONB

# MySQL: InnoDB, and binary comparison as on the other databases (keys and addresses
# are case-sensitive), whatever the database's default collation.
MYSQL_TABLE: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4",
                               "mysql_collate": "utf8mb4_bin"}

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

STATUSES = "'pending', 'sending', 'sent', 'failed', 'dead', 'cancelled', 'unknown'"
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON().with_variant(JSONB(), "postgresql")
Ts = sa.DateTime(timezone=True).with_variant(DATETIME(fsp=6), "mysql")  # microseconds on MySQL


def upgrade() -> None:
    op.create_table(
        "mailout_messages",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("idempotency_key", sa.String(255), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False, server_default="default"),
        sa.Column("priority", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("status", sa.String(16), nullable=False, server_default="pending"),
        sa.Column("reason", sa.String(64)),
        sa.Column("recipient", sa.String(320), nullable=False),
        sa.Column("sender", sa.String(320)),
        sa.Column("template", sa.String(200)),
        sa.Column("params", Json),
        sa.Column("subject", sa.Text),
        sa.Column("body_text", sa.Text),
        sa.Column("body_html", sa.Text),
        sa.Column("headers", Json),
        sa.Column("message_id", sa.String(255), nullable=False),
        sa.Column("schema_version", sa.Integer),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("unknown_attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", Ts, nullable=False),
        sa.Column("expires_at", Ts),
        sa.Column("lease_owner", sa.String(200)),
        sa.Column("lease_token", sa.String(36)),
        sa.Column("lease_expires_at", Ts),
        sa.Column("provider_message_id", sa.String(255)),
        sa.Column("last_reply_code", sa.SmallInteger),
        sa.Column("last_reply_text", sa.Text),
        sa.Column("created_at", Ts, nullable=False),
        sa.Column("first_attempt_at", Ts),
        sa.Column("last_attempt_at", Ts),
        sa.Column("sent_at", Ts),
        sa.Column("finished_at", Ts),
        sa.CheckConstraint(f"status IN ({STATUSES})", name="ck_mailout_messages_status"),
        sa.CheckConstraint("attempts >= 0", name="ck_mailout_messages_attempts"),
        sa.PrimaryKeyConstraint("id", name="pk_mailout_messages"),
        **MYSQL_TABLE,
    )
    op.create_index("ux_mailout_messages_key", "mailout_messages", ["idempotency_key"], unique=True)
    op.create_index(
        "ux_mailout_messages_message_id", "mailout_messages", ["message_id"], unique=True
    )
    if op.get_context().dialect.name == "mysql":
        _mysql_claim_indexes()
    else:
        _partial_claim_indexes()
    has_provider_id = sa.text("provider_message_id IS NOT NULL")
    finished = sa.text("finished_at IS NOT NULL")
    op.create_index(
        "ix_mailout_messages_provider_id",
        "mailout_messages",
        ["provider_message_id"],
        postgresql_where=has_provider_id,
        sqlite_where=has_provider_id,
    )
    op.create_index(
        "ix_mailout_messages_finished",
        "mailout_messages",
        ["finished_at"],
        postgresql_where=finished,
        sqlite_where=finished,
    )
    op.create_index("ix_mailout_messages_created", "mailout_messages", ["created_at"])

    op.create_table(
        "mailout_attempts",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("outbox_id", Id, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("stage", sa.String(16)),
        sa.Column("reply_code", sa.SmallInteger),
        sa.Column("enhanced_code", sa.String(16)),
        sa.Column("reply_text", sa.String(1000)),
        sa.Column("detail", sa.String(200)),
        sa.Column("recipient", sa.String(320)),
        sa.Column("worker", sa.String(200)),
        sa.Column("started_at", Ts, nullable=False),
        sa.Column("finished_at", Ts, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_mailout_attempts"),
        sa.ForeignKeyConstraint(
            ["outbox_id"],
            ["mailout_messages.id"],
            name="fk_mailout_attempts_outbox_id_mailout_messages",
            ondelete="CASCADE",
        ),
        **MYSQL_TABLE,
    )
    op.create_index("ix_mailout_attempts_outbox_id", "mailout_attempts", ["outbox_id"])


def _partial_claim_indexes() -> None:
    pending = sa.text("status = 'pending'")
    sending = sa.text("status = 'sending'")
    op.create_index(
        "ix_mailout_messages_due",
        "mailout_messages",
        ["queue", sa.text("priority DESC"), "next_attempt_at", "id"],
        postgresql_where=pending,
        sqlite_where=pending,
    )
    op.create_index(
        "ix_mailout_messages_pending_order",
        "mailout_messages",
        [sa.text("priority DESC"), "next_attempt_at", "id"],
        postgresql_where=pending,
        sqlite_where=pending,
    )
    op.create_index(
        "ix_mailout_messages_leased",
        "mailout_messages",
        ["lease_expires_at"],
        postgresql_where=sending,
        sqlite_where=sending,
    )


def _mysql_claim_indexes() -> None:
    # No partial indexes on MySQL: the claim order is led by the status instead.
    op.create_index("ix_mailout_messages_claim_due", "mailout_messages",
                    ["status", "queue", sa.text("priority DESC"), "next_attempt_at", "id"])
    op.create_index("ix_mailout_messages_claim_order", "mailout_messages",
                    ["status", sa.text("priority DESC"), "next_attempt_at", "id"])


def downgrade() -> None:
    op.drop_table("mailout_attempts")
    op.drop_table("mailout_messages")
