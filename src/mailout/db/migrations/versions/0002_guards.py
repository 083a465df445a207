"""Send-time guards: event references, redirect marker, operator pauses.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

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
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("kind", "name", name="pk_mailout_pauses"),
        sa.CheckConstraint("kind IN ('queue', 'template')", name="ck_mailout_pauses_kind"),
    )


def downgrade() -> None:
    op.drop_table("mailout_pauses")
    with op.batch_alter_table("mailout_messages") as batch:
        batch.drop_column("redirected_to")
        batch.drop_column("event_version")
        batch.drop_column("event_ref")
