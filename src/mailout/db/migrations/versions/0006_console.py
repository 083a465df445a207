"""Operator console: the audit log, and the indexes its pages read.

The message list pages by keyset within a filter (status, queue, template,
recipient). (The overview's per-outcome counts read the attempts' (outcome,
finished_at) index from migration 0004.)

On a large, busy PostgreSQL table, building these indexes blocks writes while it
runs. To avoid that, create them first with ``CREATE INDEX CONCURRENTLY`` under the
same names (``mailout db sql`` prints the definitions): this migration then skips
the ones that exist.

Revision ID: 0006
Revises: 0005
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

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Ts = sa.DateTime(timezone=True).with_variant(DATETIME(fsp=6), "mysql")  # microseconds on MySQL

MESSAGE_INDEXES = {
    "ix_mailout_messages_status_id": ["status", "id"],
    "ix_mailout_messages_queue_id": ["queue", "id"],
    "ix_mailout_messages_template_id": ["template", "id"],
    "ix_mailout_messages_recipient_id": ["recipient", "id"],
}


def upgrade() -> None:
    # MySQL 8 has no CREATE INDEX IF NOT EXISTS, and no MySQL database predates this.
    guarded = op.get_context().dialect.name != "mysql"
    for name, columns in MESSAGE_INDEXES.items():
        op.create_index(name, "mailout_messages", columns, if_not_exists=guarded)
    op.create_table(
        "mailout_audit",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("created_at", Ts, nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target", sa.String(500), nullable=False),
        sa.Column("reason", sa.String(500)),
        sa.Column("changed", sa.Integer, nullable=False),
        sa.Column("skipped", sa.Integer, nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("id", name="pk_mailout_audit"),
        **MYSQL_TABLE,
    )
    op.create_table(
        "mailout_audit_messages",
        sa.Column("audit_id", Id, nullable=False),
        sa.Column("outbox_id", Id, nullable=False),
        sa.PrimaryKeyConstraint("audit_id", "outbox_id", name="pk_mailout_audit_messages"),
        sa.ForeignKeyConstraint(["audit_id"], ["mailout_audit.id"], ondelete="CASCADE",
                                name="fk_mailout_audit_messages_audit_id_mailout_audit"),
        **MYSQL_TABLE,
    )
    op.create_index("ix_mailout_audit_messages_outbox_id", "mailout_audit_messages",
                    ["outbox_id"])


def downgrade() -> None:
    op.drop_table("mailout_audit_messages")
    op.drop_table("mailout_audit")
    for name in MESSAGE_INDEXES:
        op.drop_index(name, "mailout_messages")
