"""Delivery events, the suppression list and its log, webhook replay nonces.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME

# MySQL: InnoDB, and binary comparison as on the other databases (keys and addresses
# are case-sensitive), whatever the database's default collation.
MYSQL_TABLE: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4",
                               "mysql_collate": "utf8mb4_bin"}

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Ts = sa.DateTime(timezone=True).with_variant(DATETIME(fsp=6), "mysql")  # microseconds on MySQL
TYPES = "'delivered', 'bounced', 'deferred', 'complained', 'unsubscribed', 'rejected'"


def upgrade() -> None:
    op.create_table(
        "mailout_events",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("provider", sa.String(16), nullable=False),
        sa.Column("provider_event_id", sa.String(255), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("subtype", sa.String(32)),
        sa.Column("recipient", sa.String(320), nullable=False),
        sa.Column("outbox_id", Id),
        sa.Column("matched_by", sa.String(16)),
        sa.Column("provider_message_id", sa.String(255)),
        sa.Column("message_id", sa.String(255)),
        sa.Column("occurred_at", Ts, nullable=False),
        sa.Column("received_at", Ts, nullable=False),
        sa.Column("diagnostic", sa.String(1000)),
        sa.Column("payload", sa.Text),
        sa.PrimaryKeyConstraint("id", name="pk_mailout_events"),
        sa.ForeignKeyConstraint(["outbox_id"], ["mailout_messages.id"],
                                name="fk_mailout_events_outbox_id_mailout_messages",
                                ondelete="SET NULL"),
        sa.CheckConstraint(f"type IN ({TYPES})", name="ck_mailout_events_type"),
        **MYSQL_TABLE,
    )
    op.create_index("ux_mailout_events_provider_event", "mailout_events",
                    ["provider", "provider_event_id"], unique=True)
    op.create_index("ix_mailout_events_outbox_id", "mailout_events", ["outbox_id"])
    op.create_index("ix_mailout_events_recipient", "mailout_events",
                    ["recipient", "type", "occurred_at"])
    op.create_index("ix_mailout_events_occurred", "mailout_events", ["occurred_at"])

    op.create_table(
        "mailout_suppressions",
        sa.Column("address", sa.String(320), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("event_id", Id),
        sa.Column("detail", sa.String(200)),
        sa.Column("created_by", sa.String(200)),
        sa.Column("created_at", Ts, nullable=False),
        sa.PrimaryKeyConstraint("address", name="pk_mailout_suppressions"),
        sa.ForeignKeyConstraint(["event_id"], ["mailout_events.id"],
                                name="fk_mailout_suppressions_event_id_mailout_events",
                                ondelete="SET NULL"),
        **MYSQL_TABLE,
    )
    op.create_table(
        "mailout_suppression_log",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("address", sa.String(320), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32)),
        sa.Column("event_id", Id),
        sa.Column("actor", sa.String(200)),
        sa.Column("note", sa.String(500)),
        sa.Column("at", Ts, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_mailout_suppression_log"),
        sa.CheckConstraint("action IN ('added', 'removed')",
                           name="ck_mailout_suppression_log_action"),
        **MYSQL_TABLE,
    )
    op.create_index("ix_mailout_suppression_log_address", "mailout_suppression_log",
                    ["address"])
    op.create_table(
        "mailout_webhook_nonces",
        sa.Column("provider", sa.String(16), nullable=False),
        sa.Column("nonce", sa.String(255), nullable=False),
        sa.Column("seen_at", Ts, nullable=False),
        sa.PrimaryKeyConstraint("provider", "nonce", name="pk_mailout_webhook_nonces"),
        **MYSQL_TABLE,
    )
    op.create_index("ix_mailout_webhook_nonces_seen", "mailout_webhook_nonces", ["seen_at"])


def downgrade() -> None:
    op.drop_table("mailout_webhook_nonces")
    op.drop_table("mailout_suppression_log")
    op.drop_table("mailout_suppressions")
    op.drop_table("mailout_events")
