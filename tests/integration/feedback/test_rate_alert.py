"""The bounce and complaint rate alert fires on the crossing, once, and clears."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine, func, update

from mailout.db.schema import messages
from mailout.feedback.ingest import Policy, ingest
from mailout.feedback.rate_alert import RateMonitor
from mailout.models import Event, EventType, Provider
from mailout.outbox import EnqueueSettings, enqueue
from mailout.support.alerts import Alert, Alerts
from mailout.webhooks.settings import WebhookSettings


def test_rate_alert_fires_once_above_the_threshold_and_clears(engine: Engine) -> None:
    with engine.begin() as conn:
        for i in range(20):
            enqueue(conn, to=f"r{i}@example.com", subject="s", text="t", key=f"k{i}",
                    settings=EnqueueSettings(message_id_domain="shop.example"))
        conn.execute(update(messages).values(status="sent", sent_at=func.now()))
    fired: list[Alert] = []
    alerts = Alerts(callback=fired.append)
    settings = WebhookSettings(bounce_rate_alert=0.1, complaint_rate_alert=0.05,
                               rate_min_sent=10)
    monitor = RateMonitor(engine, settings, alerts)

    def bounce(n: int, kind: EventType = EventType.BOUNCED) -> None:
        with engine.begin() as conn:
            ingest(conn, [Event(Provider.OPERATOR, f"{kind}-{n}", kind, f"r{n}@example.com",
                                datetime.now(UTC), subtype="hard")], Policy(suppress=False))

    for n in range(2):
        bounce(n)
    assert monitor.check().bounce_rate == 0.1  # at the threshold: not above it
    bounce(2)
    rates = monitor.check()
    assert (rates.sent, rates.bounced) == (20, 3)
    monitor.check()  # still above: no second alert
    bounce(3, EventType.COMPLAINED)
    bounce(4, EventType.COMPLAINED)
    monitor.check()
    alerts.close()
    kinds = [a.kind for a in fired]
    assert kinds == ["bounce_rate", "complaint_rate"]
    assert fired[0].details["sent"] == 20
    assert "15.00%" in fired[0].summary
    fired.clear()
    alerts = Alerts(callback=fired.append)
    monitor = RateMonitor(engine, WebhookSettings(bounce_rate_alert=0.5, rate_min_sent=10,
                                                  complaint_rate_alert=None), alerts)
    monitor.firing.add("bounce_rate")  # it was firing before the threshold was raised
    monitor.check()
    alerts.close()
    assert [a.kind for a in fired] == ["bounce_rate_ok"]
