"""Complete messages: several recipients, attachments, locales, per-recipient outcomes.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME, LONGBLOB
from sqlalchemy.dialects.postgresql import JSONB

# MySQL: InnoDB, and binary comparison as on the other databases (keys and addresses
# are case-sensitive), whatever the database's default collation.
MYSQL_TABLE: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4",
                               "mysql_collate": "utf8mb4_bin"}

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON().with_variant(JSONB(), "postgresql")
Ts = sa.DateTime(timezone=True).with_variant(DATETIME(fsp=6), "mysql")  # microseconds on MySQL


def upgrade() -> None:
    with op.batch_alter_table("mailout_messages") as batch:
        batch.add_column(sa.Column("addresses", Json))
        batch.add_column(sa.Column("locale", sa.String(35)))
        batch.add_column(sa.Column("attachment_digest", sa.String(64)))
        batch.add_column(sa.Column("settled", Json))
    op.create_table(
        "mailout_attachments",
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("content", sa.LargeBinary().with_variant(LONGBLOB(), "mysql"),
                  nullable=False),
        sa.Column("created_at", Ts, nullable=False),
        sa.PrimaryKeyConstraint("sha256", name="pk_mailout_attachments"),
        **MYSQL_TABLE,
    )
    op.create_table(
        "mailout_message_attachments",
        sa.Column("outbox_id", Id, nullable=False),
        sa.Column("position", sa.SmallInteger, nullable=False, autoincrement=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("content_type", sa.String(255), nullable=False),
        sa.Column("inline", sa.Boolean, nullable=False),
        sa.Column("cid", sa.String(255)),
        sa.PrimaryKeyConstraint("outbox_id", "position", name="pk_mailout_message_attachments"),
        sa.ForeignKeyConstraint(
            ["outbox_id"], ["mailout_messages.id"], ondelete="CASCADE",
            name="fk_mailout_message_attachments_outbox_id_mailout_messages"),
        sa.ForeignKeyConstraint(
            ["sha256"], ["mailout_attachments.sha256"],
            name="fk_mailout_message_attachments_sha256_mailout_attachments"),
        **MYSQL_TABLE,
    )
    op.create_index("ix_mailout_message_attachments_sha256", "mailout_message_attachments",
                    ["sha256"])
    op.create_table(
        "mailout_attempt_recipients",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("outbox_id", Id, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("address", sa.String(320), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("reply_code", sa.SmallInteger),
        sa.Column("enhanced_code", sa.String(16)),
        sa.Column("reply_text", sa.String(1000)),
        sa.Column("created_at", Ts, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_mailout_attempt_recipients"),
        sa.ForeignKeyConstraint(
            ["outbox_id"], ["mailout_messages.id"], ondelete="CASCADE",
            name="fk_mailout_attempt_recipients_outbox_id_mailout_messages"),
        **MYSQL_TABLE,
    )
    op.create_index("ix_mailout_attempt_recipients_outbox_id", "mailout_attempt_recipients",
                    ["outbox_id"])


def downgrade() -> None:
    op.drop_table("mailout_attempt_recipients")
    op.drop_table("mailout_message_attachments")
    op.drop_table("mailout_attachments")
    with op.batch_alter_table("mailout_messages") as batch:
        batch.drop_column("settled")
        batch.drop_column("attachment_digest")
        batch.drop_column("locale")
        batch.drop_column("addresses")
