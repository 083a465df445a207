"""Why a bounce happened, and authentication-failure reports.

``mailout_events.reason`` holds the reason of a bounce (``mailbox_unknown``,
``mailbox_full``, ``rate_limited``, ``sender_rejected``... see
``mailout.feedback.bounce_rules.Reason``); NULL for other events and for events stored before
this revision. ``auth_failure`` joins the event types: an RFC 6591 report that a
message failed SPF, DKIM or DMARC checks is not a complaint and suppresses nobody.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import DATETIME

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

OLD_TYPES = "'delivered', 'bounced', 'deferred', 'complained', 'unsubscribed', 'rejected'"
NEW_TYPES = OLD_TYPES + ", 'auth_failure'"
# The name revision 0003 gave it: its "ck_mailout_events_type" went through the naming
# convention once more. Kept, so that every database names it alike.
CHECK = "ck_mailout_events_ck_mailout_events_type"
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Ts = sa.DateTime(timezone=True).with_variant(DATETIME(fsp=6), "mysql")


def upgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        # SQLite cannot alter a CHECK: the table is copied, from its definition below
        # (not reflected, so that ``mailout db sql`` can print this revision too).
        with op.batch_alter_table("mailout_events", copy_from=_events(OLD_TYPES)) as batch:
            batch.add_column(sa.Column("reason", sa.String(32)))
            batch.drop_constraint(op.f(CHECK), type_="check")
            batch.create_check_constraint(op.f(CHECK), f"type IN ({NEW_TYPES})")
        return
    op.add_column("mailout_events", sa.Column("reason", sa.String(32)))
    op.drop_constraint(op.f(CHECK), "mailout_events", type_="check")
    op.create_check_constraint(op.f(CHECK), "mailout_events", f"type IN ({NEW_TYPES})")


def downgrade() -> None:
    op.execute("DELETE FROM mailout_events WHERE type = 'auth_failure'")
    if op.get_context().dialect.name == "sqlite":
        events = _events(NEW_TYPES, sa.Column("reason", sa.String(32)))
        with op.batch_alter_table("mailout_events", copy_from=events) as batch:
            batch.drop_constraint(op.f(CHECK), type_="check")
            batch.create_check_constraint(op.f(CHECK), f"type IN ({OLD_TYPES})")
            batch.drop_column("reason")
        return
    op.drop_constraint(op.f(CHECK), "mailout_events", type_="check")
    op.create_check_constraint(op.f(CHECK), "mailout_events", f"type IN ({OLD_TYPES})")
    op.drop_column("mailout_events", "reason")


def _events(types: str, *extra: sa.Column[Any]) -> sa.Table:
    """mailout_events as revision 0003 created it (plus ``extra``)."""
    meta = sa.MetaData()
    sa.Table("mailout_messages", meta, sa.Column("id", Id, primary_key=True))
    return sa.Table(
        "mailout_events", meta,
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
        *extra,
        sa.PrimaryKeyConstraint("id", name="pk_mailout_events"),
        sa.ForeignKeyConstraint(["outbox_id"], ["mailout_messages.id"],
                                name="fk_mailout_events_outbox_id_mailout_messages",
                                ondelete="SET NULL"),
        sa.CheckConstraint(f"type IN ({types})", name=op.f(CHECK)),
        sa.Index("ux_mailout_events_provider_event", "provider", "provider_event_id",
                 unique=True),
        sa.Index("ix_mailout_events_outbox_id", "outbox_id"),
        sa.Index("ix_mailout_events_recipient", "recipient", "type", "occurred_at"),
        sa.Index("ix_mailout_events_occurred", "occurred_at"),
    )
