"""Send-time guards: event references, redirect marker, operator pauses.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME

Ts = sa.DateTime(timezone=True).with_variant(DATETIME(fsp=6), "mysql")  # microseconds on MySQL
# MySQL: InnoDB, and binary comparison as on the other databases (keys and addresses
# are case-sensitive), whatever the database's default collation.
MYSQL_TABLE: dict[str, Any] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4",
                               "mysql_collate": "utf8mb4_bin"}

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("mailout_messages") as batch:
        batch.add_column(sa.Column("event_ref", sa.String(255)))
        batch.add_column(sa.Column("event_version", sa.String(64)))
        batch.add_column(sa.Column("redirected_to", sa.String(320)))
    op.create_table(
        "mailout_pauses",
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("reason", sa.String(200)),
        sa.Column("created_at", Ts, nullable=False),
        sa.PrimaryKeyConstraint("kind", "name", name="pk_mailout_pauses"),
        sa.CheckConstraint("kind IN ('queue', 'template')", name="ck_mailout_pauses_kind"),
        **MYSQL_TABLE,
    )


def downgrade() -> None:
    op.drop_table("mailout_pauses")
    with op.batch_alter_table("mailout_messages") as batch:
        batch.drop_column("redirected_to")
        batch.drop_column("event_version")
        batch.drop_column("event_ref")
