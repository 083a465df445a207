"""A stand-in application's send-time checks and resolvers, as MAILOUT_CHECKS and
MAILOUT_RESOLVERS would name them (``tests.support.app_checks:checks``)."""

from __future__ import annotations

import threading

from sqlalchemy import Column, Connection, Integer, MetaData, String, Table, select

from mailout.models import ClaimedMessage

app = MetaData()
campaigns = Table("app_campaigns", app, Column("id", String(50), primary_key=True),
                  Column("status", String(20)), Column("version", Integer))
users = Table("app_users", app, Column("id", String(50), primary_key=True),
              Column("email", String(200)))


def campaign_still_approved(message: ClaimedMessage, conn: Connection) -> bool:
    row = conn.execute(select(campaigns.c.status, campaigns.c.version)
                       .where(campaigns.c.id == message.event_ref)).first()
    return row is not None and row.status == "approved" and str(row.version) == \
        message.event_version


def current_address(message: ClaimedMessage, conn: Connection) -> str | None:
    params = message.params or {}
    found: str | None = conn.execute(
        select(users.c.email).where(users.c.id == params.get("user_id"))).scalar()
    return found


def broken_check(message: ClaimedMessage, conn: Connection) -> bool:
    raise RuntimeError("the campaign service is down")


checks = {"campaign_approved": campaign_still_approved, "flaky": broken_check}
resolvers = {"account_alert": current_address}


# The slow check says when it has started, and decides only when the test lets it: it
# is still deciding when a short shutdown grace runs out, however busy the machine.
slow_check_started = threading.Event()
slow_check_may_finish = threading.Event()


def slow_check(message: ClaimedMessage, conn: Connection) -> bool:
    slow_check_started.set()
    slow_check_may_finish.wait(60)
    return True


slow_checks = {"slow": slow_check}
