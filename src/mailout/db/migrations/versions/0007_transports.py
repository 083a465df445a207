"""Transports by name: which transport each attempt used, and the unsettled unknown.

``mailout_attempts.transport`` names the transport (or failover member) an attempt
went through. On ``mailout_messages``: ``lease_transport`` is the transport of the
lane that holds the lease (so an attempt abandoned by a killed worker can be
attributed), ``unknown_since`` the start of the earliest attempt that may have been
delivered and is not yet settled, and ``unknown_via`` the transport it went through
(``*`` when several did). The worker compares these with the transport's
idempotency window before resending.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME

Ts = sa.DateTime(timezone=True).with_variant(DATETIME(fsp=6), "mysql")  # microseconds on MySQL

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("mailout_attempts") as batch:
        batch.add_column(sa.Column("transport", sa.String(64)))
    with op.batch_alter_table("mailout_messages") as batch:
        batch.add_column(sa.Column("lease_transport", sa.String(64)))
        batch.add_column(sa.Column("unknown_since", Ts))
        batch.add_column(sa.Column("unknown_via", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("mailout_messages") as batch:
        batch.drop_column("unknown_via")
        batch.drop_column("unknown_since")
        batch.drop_column("lease_transport")
    with op.batch_alter_table("mailout_attempts") as batch:
        batch.drop_column("transport")
