"""Webhook and ingest settings: parsing, refusals naming the variable, secrets kept out
of repr; the VERP return path."""

from __future__ import annotations

import base64
import re

import pytest

from mailout.exceptions import ConfigError
from mailout.feedback.ingest import ReturnPath
from mailout.webhooks.settings import WebhookSettings, load

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123").decode()


def test_only_configured_providers_are_enabled_and_secrets_stay_out_of_repr() -> None:
    s = load({"MAILOUT_WEBHOOK_RESEND_SECRET": SECRET,
              "MAILOUT_WEBHOOK_POSTMARK_AUTH": "hooks:long-password",
              "MAILOUT_WEBHOOK_TOLERANCE": "10m", "MAILOUT_BOUNCE_RATE_ALERT": "2%",
              "MAILOUT_COMPLAINT_RATE_ALERT": "off",
              "MAILOUT_RETURN_PATH": "bounces+{id}@shop.example",
              "MAILOUT_RETURN_PATH_SECRET": "return-path-secret-0123",
              "MAILOUT_SOFT_BOUNCE_LIMIT": "5", "MAILOUT_SOFT_BOUNCE_WINDOW": "3d"})
    assert s.providers == ("resend", "postmark")
    assert s.resend_secret == b"0123456789abcdef0123"
    assert (s.tolerance, s.bounce_rate_alert, s.complaint_rate_alert) == (600.0, 0.02, None)
    assert (s.policy.soft_bounce_limit, s.policy.soft_bounce_window) == (5, 3 * 86400.0)
    assert "long-password" not in repr(s)
    assert "0123456789" not in repr(s)
    assert "return-path-secret" not in repr(s)
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
    ({"MAILOUT_RETURN_PATH": "bounces+{id}@shop.example"}, "MAILOUT_RETURN_PATH_SECRET"),
    ({"MAILOUT_RETURN_PATH": "bounces+{id}@shop.example",
      "MAILOUT_RETURN_PATH_SECRET": "short"}, "MAILOUT_RETURN_PATH_SECRET"),
    ({"MAILOUT_SOFT_BOUNCE_LIMIT": "0"}, "MAILOUT_SOFT_BOUNCE_LIMIT"),
])
def test_bad_values_name_their_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(env)
    assert caught.value.setting == variable


RP_SECRET = "return-path-secret-0123"


def test_return_path_round_trip() -> None:
    rp = ReturnPath("bounces+{id}@Shop.example", RP_SECRET)
    address = rp.for_row(42)
    assert re.fullmatch(r"bounces\+42-[0-9a-f]{16}@Shop\.example", address)
    assert rp.row_id(f"<{address.upper()}>") == 42  # MTAs may change the case
    assert rp.row_id(address.replace("@Shop", "@other")) is None
    assert rp.row_id("bounces@shop.example") is None
    assert rp.row_id(None) is None


def test_a_return_path_without_a_valid_tag_names_no_row() -> None:
    rp = ReturnPath("bounces+{id}@shop.example", RP_SECRET)
    tag = rp.for_row(42).split("-")[1].split("@")[0]
    assert rp.row_id("bounces+42@shop.example") is None  # unsigned, as before the secret
    assert rp.row_id(f"bounces+43-{tag}@shop.example") is None  # another row, 42's tag
    assert rp.row_id("bounces+42-0000000000000000@shop.example") is None
    forged = ReturnPath("bounces+{id}@shop.example", "someone-elses-secret").for_row(42)
    assert rp.row_id(forged) is None


def test_return_path_secrets_rotate() -> None:
    old = ReturnPath("bounces+{id}@shop.example", "the-old-secret-0123")
    both = ReturnPath("bounces+{id}@shop.example", "the-new-secret-0123, the-old-secret-0123")
    assert both.row_id(old.for_row(7)) == 7  # mail sent before the rotation still links
    assert both.for_row(7) != old.for_row(7)  # the first secret signs


def test_every_receiver_is_registered_with_its_module_and_event_source() -> None:
    """One line in RECEIVERS and a module named after it whose from_settings builds the
    receiver (docs/ADDING_A_PROVIDER.md); the events it makes name their source."""
    import importlib

    from mailout.models import Provider
    from mailout.webhooks.settings import RECEIVERS

    for name in RECEIVERS:
        module = importlib.import_module(f"mailout.webhooks.{name}")
        assert module.from_settings(WebhookSettings()) is None, name  # off without secrets
        assert Provider(name).value == name
