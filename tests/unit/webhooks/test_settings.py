"""Webhook and ingest settings: parsing, refusals naming the variable, secrets kept out
of repr; the VERP return path."""

from __future__ import annotations

import base64

import pytest

from mailout.exceptions import ConfigError
from mailout.feedback.ingest import ReturnPath
from mailout.webhooks.settings import load

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123").decode()


def test_only_configured_providers_are_enabled_and_secrets_stay_out_of_repr() -> None:
    s = load({"MAILOUT_WEBHOOK_RESEND_SECRET": SECRET,
              "MAILOUT_WEBHOOK_POSTMARK_AUTH": "hooks:long-password",
              "MAILOUT_WEBHOOK_TOLERANCE": "10m", "MAILOUT_BOUNCE_RATE_ALERT": "2%",
              "MAILOUT_COMPLAINT_RATE_ALERT": "off",
              "MAILOUT_RETURN_PATH": "bounces+{id}@shop.example",
              "MAILOUT_SOFT_BOUNCE_LIMIT": "5", "MAILOUT_SOFT_BOUNCE_WINDOW": "3d"})
    assert s.providers == ("resend", "postmark")
    assert s.resend_secret == b"0123456789abcdef0123"
    assert (s.tolerance, s.bounce_rate_alert, s.complaint_rate_alert) == (600.0, 0.02, None)
    assert (s.policy.soft_bounce_limit, s.policy.soft_bounce_window) == (5, 3 * 86400.0)
    assert "long-password" not in repr(s)
    assert "0123456789" not in repr(s)
    assert load({}).providers == ()


@pytest.mark.parametrize(("env", "variable"), [
    ({"MAILOUT_WEBHOOK_RESEND_SECRET": "whsec_not base64!"}, "MAILOUT_WEBHOOK_RESEND_SECRET"),
    ({"MAILOUT_WEBHOOK_POSTMARK_AUTH": "nopassword"}, "MAILOUT_WEBHOOK_POSTMARK_AUTH"),
    ({"MAILOUT_WEBHOOK_SES_TOPICS": "my-topic"}, "MAILOUT_WEBHOOK_SES_TOPICS"),
    ({"MAILOUT_WEBHOOK_MAILGUN_KEY": "short"}, "MAILOUT_WEBHOOK_MAILGUN_KEY"),
    ({"MAILOUT_BOUNCE_RATE_ALERT": "150%"}, "MAILOUT_BOUNCE_RATE_ALERT"),
    ({"MAILOUT_WEBHOOK_TOLERANCE": "soon"}, "MAILOUT_WEBHOOK_TOLERANCE"),
    ({"MAILOUT_SNS_TEST_ORIGIN": "http://localhost:1"}, "MAILOUT_SNS_TEST_ORIGIN"),
    ({"MAILOUT_RETURN_PATH": "bounces@shop.example"}, "MAILOUT_RETURN_PATH"),
    ({"MAILOUT_RETURN_PATH": "bounces {id}@shop.example"}, "MAILOUT_RETURN_PATH"),
    ({"MAILOUT_SOFT_BOUNCE_LIMIT": "0"}, "MAILOUT_SOFT_BOUNCE_LIMIT"),
])
def test_bad_values_name_their_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(env)
    assert caught.value.setting == variable


def test_return_path_round_trip() -> None:
    rp = ReturnPath("bounces+{id}@Shop.example")
    assert rp.for_row(42) == "bounces+42@Shop.example"
    assert rp.row_id("<Bounces+42@shop.example>") == 42
    assert rp.row_id("bounces+42x@shop.example") is None
    assert rp.row_id("bounces+42@other.example") is None
    assert rp.row_id("bounces@shop.example") is None
    assert rp.row_id(None) is None
