"""The W3C trace context a message was enqueued under (``traceparent``, ``tracestate``).

Written by enqueue when the application has an active OpenTelemetry span; each of the
worker's send spans links to it. NULL for every other row and for rows stored before
this revision.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mailout_messages", sa.Column("traceparent", sa.String(55)))
    op.add_column("mailout_messages", sa.Column("tracestate", sa.String(512)))


def downgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        with op.batch_alter_table("mailout_messages") as batch:
            batch.drop_column("tracestate")
            batch.drop_column("traceparent")
        return
    op.drop_column("mailout_messages", "tracestate")
    op.drop_column("mailout_messages", "traceparent")
