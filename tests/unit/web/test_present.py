"""The console's pure parts: escaping, sparklines, filters, settings, tokens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import jinja2
import pytest
from starlette.datastructures import QueryParams

from mailout.exceptions import ConfigError
from mailout.web import filters
from mailout.web.auth import Gate, Role
from mailout.web.mailview import read_wire
from mailout.web.present import environment, masked, sparkline, visible, when
from mailout.web.settings import WebSettings

ADMIN = "admin-Tok3n-for-unit-tests"  # test credentials
READONLY = "read0nly-Tok3n-for-tests"


def test_visible_spells_out_control_and_bidi_characters() -> None:
    assert visible("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert visible("a\x00b\x7fc") == "a\\x00b\\x7fc"
    assert visible("evil\u202etxt.exe") == "evil\\u202etxt.exe"
    assert visible("line one\nline\ttwo") == "line one\nline\ttwo"
    assert visible("Jörg <b>") == "Jörg <b>"  # escaping is the template's job
    assert visible(None) == ""


def test_templates_autoescape_everything() -> None:
    env = environment(jinja2.DictLoader({"t.html": "{{ v | visible }}|{{ v }}"}))
    out = env.get_template("t.html").render(v="<script>alert(1)</script>\x1b")
    assert out == ("&lt;script&gt;alert(1)&lt;/script&gt;\\x1b|"
                   "&lt;script&gt;alert(1)&lt;/script&gt;\x1b")
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ missing }}").render()


def test_sparkline_scales_the_peak_to_the_top() -> None:
    line = sparkline([0, 5, 10], width=100, height=22)
    assert line.points == "0,21 50,11 100,1"
    assert line.area == "0,22 0,21 50,11 100,1 100,22"
    assert (line.peak, line.total) == (10, 15)
    flat = sparkline([0, 0], width=10, height=12)
    assert flat.points == "0,11 10,11"
    assert sparkline([]).total == 0


def test_masked_and_when() -> None:
    assert masked("alice@example.com", sees_personal=False) == "a***@example.com"
    assert masked("alice@example.com", sees_personal=True) == "alice@example.com"
    assert when(datetime(2024, 5, 1, 12, 0, 3, tzinfo=UTC)) == "2024-05-01 12:00:03Z"
    assert when(None) == "-"


def test_filter_parsing_keeps_good_fields_and_reports_bad_ones() -> None:
    now = datetime(2024, 5, 1, 12, tzinfo=UTC)
    parsed = filters.parse(QueryParams(
        "status=failed&status=bogus&queue=bulk&span=24h&to=2024-05-01T11:00&q=+k-1+"), now)
    assert parsed.filter.statuses == ("failed",)
    assert parsed.filter.queue == "bulk"
    assert parsed.filter.created_from == now - timedelta(days=1)
    assert parsed.filter.created_to == datetime(2024, 5, 1, 11, tzinfo=UTC)
    assert parsed.filter.search == "k-1"
    assert parsed.errors == ["unknown status bogus"]
    assert parsed.query()["status"] == ["failed"]
    bad = filters.parse(QueryParams("span=1y&from=yesterday"))
    assert bad.filter.created_from is None
    assert len(bad.errors) == 2
    assert "status=failed queue=bulk" in parsed.filter.describe()


def test_settings_refuse_weak_or_shared_tokens() -> None:
    with pytest.raises(ConfigError, match="MAILOUT_WEB_TOKEN"):
        WebSettings(token="short")
    with pytest.raises(ConfigError, match="must differ"):
        WebSettings(token=ADMIN, readonly_token=ADMIN)
    env = {"MAILOUT_WEB_TOKEN": ADMIN, "MAILOUT_WEB_READONLY_RECIPIENTS": "full",
           "MAIL_FROM": "Shop <shop@example.com>", "MAILOUT_TEMPLATES": "tpl"}
    loaded = WebSettings.from_env(env)
    assert loaded.readonly_sees_recipients
    assert loaded.mail_from == "Shop <shop@example.com>"
    assert str(loaded.templates_dir) == "tpl"
    assert ADMIN not in repr(loaded)
    with pytest.raises(ConfigError, match="READONLY_RECIPIENTS"):
        WebSettings.from_env({"MAILOUT_WEB_READONLY_RECIPIENTS": "some"})
    assert WebSettings(token=ADMIN, secret="s3").session_key() == "s3"


def test_without_a_secret_one_is_made_once_kept_private_and_not_from_the_tokens(
        tmp_path: Path) -> None:
    # Before: sha256 of the tokens, so a cookie from any GET /login let anyone test
    # token guesses offline (about 19,600 a second in pure Python).
    made = WebSettings(token=ADMIN, state_dir=tmp_path / "a").session_key()
    assert WebSettings(token=ADMIN + "x", state_dir=tmp_path / "a").session_key() == made
    assert WebSettings(token=ADMIN, state_dir=tmp_path / "b").session_key() != made
    assert ADMIN not in made
    assert len(made) >= 40
    assert (tmp_path / "a" / "web-secret").stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("token", ["aaaaaaaaaaaaaaaa", "abababababababababab",
                                   "1111111122222222"])
def test_tokens_easy_to_guess_are_refused(token: str) -> None:
    with pytest.raises(ConfigError, match="too easy to guess"):
        WebSettings(token=token)


def test_tokens_grant_their_role_only() -> None:
    gate = Gate(WebSettings(token=ADMIN, readonly_token=READONLY))
    assert gate.role_of(ADMIN) is Role.ADMIN
    assert gate.role_of(READONLY) is Role.READONLY
    assert gate.role_of(ADMIN[:-1]) is None
    assert gate.role_of("") is None
    assert Gate(WebSettings(readonly_token=READONLY)).role_of(ADMIN) is None


def test_wire_is_read_back_into_parts() -> None:
    wire = (b"Subject: Hi\r\nMIME-Version: 1.0\r\nContent-Type: multipart/alternative; "
            b'boundary="b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nline 1\r\nline 2\r\n'
            b"--b\r\nContent-Type: text/html\r\n\r\n<p>x</p>\r\n--b--\r\n")
    view = read_wire(wire)
    assert view.subject == "Hi"
    assert view.text == "line 1\nline 2"
    assert view.html == "<p>x</p>"
    assert ("Subject", "Hi") in view.headers
