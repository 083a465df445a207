"""Outages: attempts say whether they were charged to their message.

An attempt that met a provider outage or a configuration error is logged but does
not count against ``max_attempts``; ``charged`` records which. Older rows were all
charged except paused ones, which this migration marks. The (outcome, finished_at)
index lets ``mailout status`` find the newest outage attempt without a scan.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

OUTCOME_INDEX = "ix_mailout_attempts_outcome_finished"


def upgrade() -> None:
    # A plain ADD COLUMN (with its default) works on both dialects, no table copy.
    op.add_column("mailout_attempts", sa.Column("charged", sa.Boolean, nullable=False,
                                                server_default=sa.true()))
    op.execute("UPDATE mailout_attempts SET charged = false WHERE outcome = 'paused'")
    # Another migration may create the same index (the console's): keep the first.
    # MySQL 8 has no CREATE INDEX IF NOT EXISTS, and no MySQL database predates this.
    op.create_index(OUTCOME_INDEX, "mailout_attempts", ["outcome", "finished_at"],
                    if_not_exists=op.get_context().dialect.name != "mysql")


def downgrade() -> None:
    op.drop_index(OUTCOME_INDEX, "mailout_attempts",
                  if_exists=op.get_context().dialect.name != "mysql")
    with op.batch_alter_table("mailout_attempts") as batch:
        batch.drop_column("charged")
