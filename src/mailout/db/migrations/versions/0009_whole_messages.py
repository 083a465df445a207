"""Messages stored whole (``mailout_messages.mime``), and ordered batches (``batch``).

A message the enqueuing code built itself (Django's email backend stores
``EmailMessage.message()``) keeps its bytes, which the SMTP transport sends as they
are; NULL for every other row and for rows stored before this revision. ``batch`` is
shared by the rows of one ordered enqueue (a Django ``send_messages`` call), which a
worker starts one after the other.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import LONGBLOB

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mailout_messages",
                  sa.Column("mime", sa.LargeBinary().with_variant(LONGBLOB(), "mysql")))
    op.add_column("mailout_messages", sa.Column("batch", sa.String(32)))


def downgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        with op.batch_alter_table("mailout_messages") as batch:
            batch.drop_column("batch")
            batch.drop_column("mime")
        return
    op.drop_column("mailout_messages", "batch")
    op.drop_column("mailout_messages", "mime")
