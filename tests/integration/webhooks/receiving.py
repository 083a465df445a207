"""The receivers' contract, run by each provider's test file over real HTTP (uvicorn),
storing into SQLite and PostgreSQL: a signed hard bounce is stored, linked and
suppresses the address; a forged copy is refused (401) and a stale one too; an exact
replay of a signed delivery is refused (400); the same event delivered again with a
fresh signature is stored once.

A provider's file subclasses :class:`ReceiverContract` (:class:`TimedReceiverContract`
when its signatures carry a time) and gives a ``case`` fixture: its :class:`Case`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from bench.support import webhooks as w
from bench.support.tls import TestCerts
from sqlalchemy import Engine, func, select, update

from mailout.db import delivery_events
from mailout.db.schema import events, messages, suppressions
from mailout.outbox import EnqueueSettings, enqueue
from mailout.webhooks.handler import WebhookHandler
from mailout.webhooks.settings import WebhookSettings, svix_secret
from tests.integration.webhooks.cases import Built, Case


def settings_for(sendgrid_keys: w.SendgridKeys, cert_server: w.CertServer,
                 test_certs: TestCerts, **overrides: Any) -> WebhookSettings:
    values: dict[str, Any] = {
        "resend_secret": svix_secret("test", w.RESEND_SECRET),
        "postmark_auth": w.POSTMARK_AUTH, "ses_topics": frozenset({w.SES_TOPIC}),
        "sendgrid_key": sendgrid_keys.public_b64, "mailgun_key": w.MAILGUN_KEY.encode(),
        "brevo_token": w.BREVO_TOKEN, "brevo_auth": w.BREVO_AUTH,
        "sns_test_origin": cert_server.origin, "sns_test_ca_file": str(test_certs.ca_file),
        "bounce_rate_alert": None, "complaint_rate_alert": None, "max_bytes": 64 * 1024,
    }
    values.update(overrides)
    return WebhookSettings(**values)


@dataclass
class Hook:
    server: w.WebhookServer
    handler: WebhookHandler
    engine: Engine

    def post(self, provider: str, built: Built) -> tuple[int, dict[str, Any]]:
        return w.post(f"{self.server.url}/{provider}", built[0], built[1])


def sent_row(engine: Engine, to: str) -> tuple[int, str, str]:
    """An outbox row marked sent with a provider id: (row id, provider id, Message-ID)."""
    pid = f"pid-{uuid.uuid4().hex[:16]}"
    with engine.begin() as conn:
        result = enqueue(conn, to=to, subject="Your order", text="Thanks",
                         settings=EnqueueSettings(message_id_domain="shop.example"))
        conn.execute(update(messages).where(messages.c.id == result.id).values(
            status="sent", provider_message_id=pid, sent_at=func.now()))
    return result.id, pid, result.message_id


def stored(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(events).order_by(events.c.id))]


def suppressed(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(select(suppressions.c.address, suppressions.c.reason)).all())


class ReceiverContract:
    """What every provider's receiver does; run once per provider's test file."""

    def test_a_signed_hard_bounce_is_stored_linked_and_suppresses(self, hook: Hook,
                                                                 case: Case) -> None:
        provider = case.provider
        row_id, pid, mid = sent_row(hook.engine, "Gone@Example.com")
        status, body = hook.post(provider, case.bounce("gone@example.com", pid, mid))
        assert (status, body["stored"], body["matched"], body["suppressed"]) == (200, 1, 1, 1)
        [event] = stored(hook.engine)
        assert (event["provider"], event["type"], event["subtype"]) == (provider, "bounced",
                                                                        "hard")
        assert event["outbox_id"] == row_id
        assert event["matched_by"] in ("provider_id", "message_id")
        assert event["recipient"] == "gone@example.com"
        assert event["payload"]
        assert len(event["payload"].encode()) <= 8192
        assert suppressed(hook.engine) == {"gone@example.com": "hard_bounce"}
        with hook.engine.connect() as conn:
            [record] = delivery_events.events_for(conn, row_id)
        assert record.type == "bounced"

    def test_forged_requests_are_refused_and_nothing_is_stored(self, hook: Hook,
                                                              case: Case) -> None:
        _row, pid, mid = sent_row(hook.engine, "a@example.com")
        status, body = hook.post(case.provider,
                                 case.forge(case.bounce("a@example.com", pid, mid)))
        assert status == 401, body
        assert body["error"] == "bad_signature"
        status, body = hook.post(case.provider,
                                 case.unsigned(case.bounce("a@example.com", pid, mid)))
        assert status == 401
        assert body["error"] in ("missing_auth", "bad_signature")
        assert stored(hook.engine) == []
        assert suppressed(hook.engine) == {}

    def test_replays_are_refused_and_redeliveries_are_stored_once(self, hook: Hook,
                                                                 case: Case) -> None:
        _row, pid, mid = sent_row(hook.engine, "b@example.com")
        first = case.bounce("b@example.com", pid, mid)
        assert hook.post(case.provider, first)[0] == 200
        status, body = hook.post(case.provider, first)  # the exact same request again
        if case.replay_refused:
            assert (status, body["error"]) == (400, "replayed")
        else:  # nothing signed to tell a replay by: accepted, and stored once
            assert (status, body["stored"], body["duplicates"]) == (200, 0, 1)
        status, body = hook.post(case.provider, case.redeliver(first))
        assert (status, body["stored"], body["duplicates"]) == (200, 0, 1)
        assert len(stored(hook.engine)) == 1


class TimedReceiverContract(ReceiverContract):
    """For providers whose signatures carry the time they were made."""

    def test_stale_signatures_are_refused(self, hook: Hook, case: Case) -> None:
        assert case.stale is not None
        status, body = hook.post(case.provider, case.stale("a@example.com", "pid-1", "<m@x>"))
        assert (status, body["error"]) == (401, "stale")
        assert stored(hook.engine) == []
