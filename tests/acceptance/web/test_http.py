"""The web console over plain HTTP (httpx against the real app on a loopback port):
authentication, roles, CSRF, security headers, the e-mail viewer's policy,
.eml downloads, template previews, mounting, and `mailout web` itself."""

from __future__ import annotations

import contextlib
import email
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, func, select, update
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount

from mailout import db
from mailout.db.schema import audit, messages, pauses
from mailout.exceptions import ConfigError
from mailout.outbox import EnqueueSettings, enqueue
from mailout.web import Identity, Role, create_app
from mailout.web.settings import WebSettings
from tests.acceptance.cli.test_main import MAILOUT, clean_env, free_port
from tests.support.webconsole import (
    ADMIN_TOKEN,
    EXAMPLES,
    READONLY_TOKEN,
    ConsoleServer,
    console_settings,
    serve_console,
)

ENQUEUE = EnqueueSettings(message_id_domain="shop.example.com", templates_dir=EXAMPLES)
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}
PAGES = ("/", "/messages", "/messages/{id}", "/messages/{id}/body.html",
         "/messages/{id}/message.eml", "/audit", "/templates", "/templates/invoice",
         "/confirm?action=retry&id={id}")


@pytest.fixture
def failed_id(engine: Engine) -> int:
    with engine.begin() as conn:
        rid = enqueue(conn, to="dana@example.com", subject="Remote <img>", text="plain text",
                      html="<p>hello</p><img src='https://tracker.example/p.gif'>",
                      key="k-1", settings=ENQUEUE).id
        conn.execute(update(messages).where(messages.c.id == rid).values(status="failed"))
    return rid


@pytest.fixture
def console(db_url: str) -> Iterator[ConsoleServer]:
    with serve_console(db_url) as server:
        yield server


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def logged_in(base: str, token: str = ADMIN_TOKEN, name: str = "Ann") -> httpx.Client:
    client = httpx.Client(base_url=base)
    form = client.get("/login")
    reply = client.post("/login", data={"csrf": csrf_of(form.text), "name": name,
                                        "token": token, "next": "/"})
    assert reply.status_code == 303
    return client


def status_of(engine: Engine, rid: int) -> str:
    with engine.connect() as conn:
        return str(conn.scalar(select(messages.c.status).where(messages.c.id == rid)))


def audit_count(engine: Engine) -> int:
    """Entries of operator actions (sign-ins and sign-outs are logged too, apart)."""
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(audit).where(
            audit.c.action.not_in(["sign_in", "sign_in_failed", "sign_out"]))) or 0)


def sign_ins(engine: Engine) -> list[tuple[str, str, str]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(  # type: ignore[misc]
            select(audit.c.action, audit.c.actor, audit.c.target)
            .where(audit.c.action.in_(["sign_in", "sign_in_failed", "sign_out"]))
            .order_by(audit.c.id)).all()]


def test_without_credentials_every_page_answers_401(console: ConsoleServer,
                                                      failed_id: int) -> None:
    for page in PAGES:
        reply = httpx.get(console.url + page.format(id=failed_id))
        assert reply.status_code == 401, page
        assert reply.headers["www-authenticate"] == 'Bearer realm="mailout"'
        assert 'id="login-form"' in reply.text
        assert "dana@example.com" not in reply.text
    wrong = httpx.get(console.url + "/", headers={"Authorization": "Bearer not-the-token-000000"})
    assert wrong.status_code == 401
    assert httpx.post(console.url + "/act", data={"action": "retry"}).status_code == 401


def test_login_form_opens_a_session_and_refuses_a_wrong_token(console: ConsoleServer) -> None:
    client = httpx.Client(base_url=console.url)
    form = client.get("/login")
    bad = client.post("/login", data={"csrf": csrf_of(form.text), "name": "Ann",
                                      "token": "wrong-token-0000000000"})
    assert bad.status_code == 401
    no_csrf = client.post("/login", data={"name": "Ann", "token": ADMIN_TOKEN})
    assert no_csrf.status_code == 403
    good = client.post("/login", data={"csrf": csrf_of(bad.text), "name": "Ann",
                                       "token": ADMIN_TOKEN, "next": "/audit"})
    assert good.status_code == 303
    assert good.headers["location"] == "/audit"
    cookie = good.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert client.get("/").status_code == 200
    evil = client.post("/login", data={"csrf": csrf_of(client.get("/login").text),
                                       "name": "Ann", "token": ADMIN_TOKEN,
                                       "next": "//evil.example/"})
    assert evil.headers["location"] == "/"  # never redirected off the console
    out = client.post("/logout", data={"csrf": csrf_of(client.get("/").text)})
    assert out.status_code == 303
    assert client.get("/").status_code == 401


def test_a_cookie_copied_before_logout_no_longer_works(console: ConsoleServer,
                                                      engine: Engine) -> None:
    client = logged_in(console.url)
    copy = httpx.Client(base_url=console.url, cookies=dict(client.cookies))
    assert copy.get("/").status_code == 200
    client.post("/logout", data={"csrf": csrf_of(client.get("/").text)})
    assert copy.get("/").status_code == 401  # before: it worked for 8 hours
    assert [a for a, _, _ in sign_ins(engine)] == ["sign_in", "sign_out"]


def test_sign_ins_are_audited_and_failures_slow_down_per_address(
        console: ConsoleServer, engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    client = httpx.Client(base_url=console.url)
    answers = []
    for _ in range(8):
        form = client.get("/login").text
        answers.append(client.post("/login", data={"csrf": csrf_of(form), "name": "Mallory",
                                                   "token": "guess-0123456789abcdef"}))
    codes = [a.status_code for a in answers]
    assert codes[:5] == [401] * 5  # five free tries, then a wait
    assert 429 in codes[5:]
    throttled = next(a for a in answers if a.status_code == 429)
    assert int(throttled.headers["retry-after"]) >= 1
    # Even the right token waits out the delay: no guess is checked meanwhile.
    form = client.get("/login").text
    assert client.post("/login", data={"csrf": csrf_of(form), "name": "Ann",
                                       "token": ADMIN_TOKEN}).status_code == 429
    logged = sign_ins(engine)
    assert logged[0] == ("sign_in_failed", "Mallory (web)", "from 127.0.0.1")
    assert {a for a, _, _ in logged} == {"sign_in_failed"}
    assert "failed sign-in from 127.0.0.1" in caplog.text
    assert "guess-0123456789abcdef" not in caplog.text


def test_post_without_csrf_token_is_refused_and_changes_nothing(
    console: ConsoleServer, engine: Engine, failed_id: int,
) -> None:
    client = logged_in(console.url)
    action = {"action": "retry", "id": str(failed_id), "reason": "forged"}
    assert client.post("/act", data=action).status_code == 403
    assert client.post("/act", data={**action, "csrf": "guessed"}).status_code == 403
    token = csrf_of(client.get("/").text)
    foreign = client.post("/act", data={**action, "csrf": token},
                          headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    assert status_of(engine, failed_id) == "failed"
    assert audit_count(engine) == 0
    done = client.post("/act", data={**action, "csrf": token, "next": f"/messages/{failed_id}"})
    assert done.status_code == 303
    assert status_of(engine, failed_id) == "pending"
    assert audit_count(engine) == 1


def test_read_only_role_sees_but_cannot_act(console: ConsoleServer, engine: Engine,
                                            failed_id: int) -> None:
    page = httpx.get(f"{console.url}/messages/{failed_id}", headers=READONLY)
    assert page.status_code == 200
    assert "d***@example.com" in page.text
    assert "dana@example.com" not in page.text
    assert 'id="actions"' not in page.text
    assert httpx.get(f"{console.url}/messages/{failed_id}/message.eml",
                     headers=READONLY).status_code == 404
    refused = httpx.post(f"{console.url}/act", headers=READONLY,
                         data={"action": "retry", "id": str(failed_id)})
    assert refused.status_code == 403
    client = logged_in(console.url, READONLY_TOKEN, "Rita")
    assert client.get(f"/confirm?action=retry&id={failed_id}").status_code == 403
    form = client.post("/act", data={"action": "retry", "id": str(failed_id),
                                     "csrf": csrf_of(client.get("/").text)})
    assert form.status_code == 403
    assert status_of(engine, failed_id) == "failed"
    assert audit_count(engine) == 0


def test_read_only_role_cannot_learn_whether_an_address_is_a_customer(
        console: ConsoleServer, failed_id: int) -> None:
    # Before: q=dana@... listed 1 row and q=nobody@... 0, to a role that sees masks only.
    link = f'href="/messages/{failed_id}"'
    for who in ("dana@example.com", "nobody@example.com"):
        page = httpx.get(f"{console.url}/messages", params={"q": who}, headers=READONLY).text
        assert link not in page
        assert "cannot search by recipient address" in page
    by_key = httpx.get(f"{console.url}/messages", params={"q": "k-1"}, headers=READONLY).text
    assert link in by_key  # other searches still work
    admin = httpx.get(f"{console.url}/messages", params={"q": "dana@example.com"},
                      headers=ADMIN).text
    assert link in admin


@pytest.mark.parametrize("target", ["/\\evil.example", "/\t/evil.example", "//evil.example",
                                    "/\n/evil.example", "https://evil.example/"])
def test_a_next_that_leaves_the_console_is_replaced_in_links_and_redirects(
        console: ConsoleServer, failed_id: int, target: str) -> None:
    client = logged_in(console.url)
    page = client.get("/confirm", params={"action": "retry", "id": str(failed_id),
                                          "next": target}).text
    [back] = re.findall(r'<a href="([^"]*)">Back, change nothing</a>', page)
    assert back == "/messages"
    done = client.post("/act", data={"action": "retry", "id": str(failed_id), "next": target,
                                     "csrf": csrf_of(page)})
    assert done.status_code == 303
    assert done.headers["location"] == "/messages"


def test_a_next_inside_the_console_is_kept(console: ConsoleServer, failed_id: int) -> None:
    client = logged_in(console.url)
    page = client.get("/confirm", params={"action": "retry", "id": str(failed_id),
                                          "next": "/messages?status=failed"}).text
    assert '<a href="/messages?status=failed">Back, change nothing</a>' in page


def test_dns_rebinding_cannot_read_or_act_on_a_console_without_auth(
        db_url: str, engine: Engine, failed_id: int) -> None:
    # `mailout web --no-auth` on loopback; a page under rebind.evil.example whose name
    # now resolves to 127.0.0.1 sends its own name as Host, and as Origin.
    with serve_console(db_url, settings=console_settings(token=None, readonly_token=None),
                       anonymous=True) as console:
        evil = f"rebind.evil.example:{console.port}"
        page = httpx.get(f"{console.url}/messages/{failed_id}", headers={"Host": evil})
        assert page.status_code == 400
        assert "dana@example.com" not in page.text
        acted = httpx.post(f"{console.url}/act", headers={"Host": evil,
                                                          "Origin": f"http://{evil}"},
                           data={"action": "pause", "kind": "queue", "name": "default"})
        assert acted.status_code == 400
        for host in (f"127.0.0.1:{console.port}", f"localhost:{console.port}",
                     f"[::1]:{console.port}", f"LOCALHOST.:{console.port}"):
            assert httpx.get(f"{console.url}/", headers={"Host": host}).status_code == 200
    assert audit_count(engine) == 0
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(pauses)).scalar_one() == 0


def test_the_public_name_behind_a_proxy_is_added_by_a_setting(db_url: str) -> None:
    settings = WebSettings.from_env({"MAILOUT_WEB_TOKEN": ADMIN_TOKEN,
                                     "MAILOUT_WEB_HOSTS": "Mail-Admin.example.com"})
    with serve_console(db_url, settings=settings) as console:
        ok = httpx.get(f"{console.url}/", headers={**ADMIN, "Host": "mail-admin.example.com"})
        assert ok.status_code == 200
        other = httpx.get(f"{console.url}/", headers={**ADMIN, "Host": "other.example.com"})
        assert other.status_code == 400
    with pytest.raises(ConfigError, match="MAILOUT_WEB_HOSTS"):
        WebSettings.from_env({"MAILOUT_WEB_HOSTS": "*.example.com"})


def _raw_post(port: int, head: bytes, chunk: bytes, limit: int) -> tuple[bytes, int]:
    """POST ``head`` then ``chunk`` again and again, up to ``limit`` bytes, until the
    server answers; returns its answer and how many body bytes went out."""
    import socket

    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        sock.setblocking(False)
        answer = b""
        while sent < limit and not answer:
            with contextlib.suppress(BlockingIOError):
                answer = sock.recv(65536)
            try:
                sock.sendall(chunk)
                sent += len(chunk)
            except (BlockingIOError, OSError):
                time.sleep(0.01)
        sock.setblocking(True)
        while not answer.endswith(b"\r\n\r\n") and b"\r\n\r\n" not in answer:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    return answer, sent


@pytest.mark.parametrize("chunked", [False, True])
def test_an_oversized_body_is_refused_before_it_is_parsed(console: ConsoleServer,
                                                         chunked: bool) -> None:
    # Before: a 300 MiB multipart login POST was spooled to a temporary file, then 403.
    part = b"--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x\"\r\n\r\n"
    head = (b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: multipart/form-data; boundary=b\r\n")
    block = b"x" * 65536
    if chunked:
        head += b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n" % (len(part), part)
        chunk = b"%x\r\n%s\r\n" % (len(block), block)
    else:
        head += b"Content-Length: %d\r\n\r\n%s" % (300 * 2**20, part)
        chunk = block
    answer, sent = _raw_post(console.port, head, chunk, limit=300 * 2**20)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert sent < 16 * 2**20  # refused early: not after reading the 300 MiB


def test_bearer_admin_acts_with_its_name_in_the_audit_log(
    console: ConsoleServer, engine: Engine, failed_id: int,
) -> None:
    reply = httpx.post(f"{console.url}/act", headers={**ADMIN, "X-Mailout-Actor": "deploy-bot"},
                       data={"action": "retry", "id": str(failed_id), "reason": "after fix"})
    assert reply.status_code == 303
    log = httpx.get(console.url + "/audit", headers=ADMIN).text
    # The token is who acted; the name a script gives is only its claim.
    assert "admin token, says &#34;deploy-bot&#34; (api, admin)" in log
    assert "after fix" in log


def test_security_headers_and_the_mail_viewer_policy(console: ConsoleServer,
                                                     failed_id: int) -> None:
    page = httpx.get(f"{console.url}/messages/{failed_id}", headers=ADMIN)
    csp = page.headers["content-security-policy"]
    assert "script-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["referrer-policy"] == "same-origin"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-store"
    assert '<iframe id="mail-html" class="mail" sandbox=""' in page.text

    body = httpx.get(f"{console.url}/messages/{failed_id}/body.html", headers=ADMIN)
    mail_csp = body.headers["content-security-policy"]
    assert "sandbox" in mail_csp
    assert "img-src data: cid:;" in mail_csp  # no remote images
    assert "script" not in mail_csp  # default-src 'none' covers scripts
    assert body.headers["x-frame-options"] == "SAMEORIGIN"
    assert body.headers["referrer-policy"] == "no-referrer"
    assert "tracker.example" in body.text  # the HTML is shown as sent...
    remote = httpx.get(f"{console.url}/messages/{failed_id}/body.html?remote=1", headers=ADMIN)
    assert "img-src data: cid: https: http:" in remote.headers["content-security-policy"]


def test_eml_download_is_the_rendered_message(console: ConsoleServer, failed_id: int) -> None:
    reply = httpx.get(f"{console.url}/messages/{failed_id}/message.eml", headers=ADMIN)
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "message/rfc822"
    assert reply.headers["content-disposition"] == \
        f'attachment; filename="message-{failed_id}.eml"'
    parsed = email.message_from_bytes(reply.content)
    assert parsed["To"] == "dana@example.com"
    assert parsed["Idempotency-Key"] == "k-1"
    assert parsed["Message-ID"].endswith("@shop.example.com>")


def test_template_previews_render_every_sample_and_never_enqueue(
    db_url: str, engine: Engine, tmp_path: Path,
) -> None:
    broken = tmp_path / "templates" / "welcome"
    broken.mkdir(parents=True)
    (broken / "subject.txt").write_text("Welcome {{ name }}")
    (broken / "text.txt").write_text("Your code: {{ code }}")
    (broken / "preview.json").write_text('{"en": {"name": "Ann"}}')
    (tmp_path / "templates" / "bare").mkdir()
    (tmp_path / "templates" / "bare" / "subject.txt").write_text("x")
    (tmp_path / "templates" / "bare" / "text.txt").write_text("y")
    with serve_console(db_url) as console:
        listing = httpx.get(console.url + "/templates", headers=ADMIN).text
        for name in ("order_confirmation", "invoice", "password_reset"):
            assert f"/templates/{name}?sample=en" in listing
        de = httpx.get(console.url + "/templates/order_confirmation?sample=de", headers=ADMIN)
        assert de.status_code == 200
        assert "Hallo Jörg" in de.text  # the sample "de" renders order_confirmation/de/
        assert "Ihre Bestellung #1002 ist bestätigt" in de.text
        en = httpx.get(console.url + "/templates/order_confirmation?sample=en", headers=ADMIN)
        assert "Your order #1001 is confirmed" in en.text
        html = httpx.get(console.url + "/templates/order_confirmation/body.html?sample=de",
                         headers=ADMIN)
        assert "Kaffeebohnen" in html.text
        assert "sandbox" in html.headers["content-security-policy"]
    settings = console_settings(templates_dir=tmp_path / "templates")
    with serve_console(db_url, settings=settings) as console:
        page = httpx.get(console.url + "/templates/welcome?sample=en", headers=ADMIN).text
        assert "Cannot render" in page
        assert "&#39;code&#39; is undefined" in page
        listing = httpx.get(console.url + "/templates", headers=ADMIN).text
        assert "no preview.json" in listing
        missing = httpx.get(console.url + "/templates/..%2Fetc", headers=ADMIN)
        assert missing.status_code == 404
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(messages)) == 0


def test_mounted_in_a_host_app_behind_its_auth(db_url: str, failed_id: int) -> None:
    def host_auth(request: Request) -> Identity | None:
        user = request.headers.get("x-host-user")
        return Identity(user, Role.ADMIN) if user else None

    console = create_app(db_url, settings=console_settings(token=None, readonly_token=None),
                         authenticate=host_auth)
    host = Starlette(routes=[Mount("/ops/mail", app=console)])
    with ConsoleServer(host) as server:
        assert httpx.get(server.url + "/ops/mail/").status_code == 401
        page = httpx.get(f"{server.url}/ops/mail/messages/{failed_id}",
                         headers={"X-Host-User": "hana"})
        assert page.status_code == 200
        assert 'href="/ops/mail/messages"' in page.text
        assert f'src="/ops/mail/messages/{failed_id}/body.html"' in page.text
        assert 'href="/ops/mail/static/console.css"' in page.text
        assert httpx.get(server.url + "/ops/mail/static/console.css").status_code == 200
    console.state.console.engine.dispose()


@pytest.mark.slow
def test_mailout_web_serves_on_loopback_and_refuses_unsafe_starts(db_url: str) -> None:
    env = {"MAILOUT_DATABASE_URL": db_url}
    no_token = subprocess.run([MAILOUT, "web", "--port", str(free_port())], env=clean_env(env),
                              capture_output=True, text=True, timeout=60, check=False)
    assert no_token.returncode == 1
    assert "MAILOUT_WEB_TOKEN" in no_token.stderr
    exposed = subprocess.run([MAILOUT, "web", "--host", "0.0.0.0", "--no-auth"],
                             env=clean_env(env), capture_output=True, text=True, timeout=60,
                             check=False)
    assert exposed.returncode == 2
    assert "loopback" in exposed.stderr
    port = free_port()
    proc = subprocess.Popen([MAILOUT, "web", "--port", str(port)],
                            env=clean_env({**env, "MAILOUT_WEB_TOKEN": ADMIN_TOKEN}),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                reply = httpx.get(f"http://127.0.0.1:{port}/")
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "mailout web did not start"
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.1)
        assert reply.status_code == 401
        assert "server" not in reply.headers
        assert httpx.get(f"http://127.0.0.1:{port}/", headers=ADMIN).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_bulk_action_over_a_filter_changes_what_was_confirmed_only(
    console: ConsoleServer, engine: Engine,
) -> None:
    def add(n: int, prefix: str, status: str) -> list[int]:
        with engine.begin() as conn:
            ids = [enqueue(conn, to=f"{prefix}{i}@example.com", subject="s", text="t",
                           key=f"{prefix}-{i}", queue="bulk", settings=ENQUEUE).id
                   for i in range(n)]
            conn.execute(update(messages).where(messages.c.id.in_(ids)).values(status=status))
        return ids

    dead = add(3, "dead", "dead")
    other_queue = add(1, "sent", "sent")
    client = logged_in(console.url)
    page = client.get("/confirm", params={"action": "retry", "scope": "filter",
                                          "status": "dead", "queue": "bulk",
                                          "next": "/messages?queue=bulk"})
    assert page.status_code == 200
    assert re.search(r'id="confirm-count">3<', page.text)
    upto = re.search(r'name="upto" value="(\d+)"', page.text)
    assert upto is not None
    late = add(2, "late", "dead")  # enqueued after the confirmation page
    form = {"action": "retry", "scope": "filter", "status": "dead", "queue": "bulk",
            "upto": upto.group(1), "reason": "provider fixed", "csrf": csrf_of(page.text),
            "next": "/messages?queue=bulk"}
    done = client.post("/act", data=form)
    assert done.status_code == 303
    assert done.headers["location"] == "/messages?queue=bulk"
    assert [status_of(engine, i) for i in dead] == ["pending"] * 3
    assert [status_of(engine, i) for i in late] == ["dead", "dead"]
    assert status_of(engine, other_queue[0]) == "sent"
    flash = client.get("/messages?queue=bulk").text
    assert "Retry: changed 3" in flash
    log = client.get("/audit").text
    assert f"status=dead queue=bulk (ids up to {upto.group(1)})" in log


def test_message_page_lists_its_delivery_events_escaped_and_masked(
    console: ConsoleServer, engine: Engine, failed_id: int,
) -> None:
    from datetime import UTC, datetime

    from mailout.db.delivery_events import Link, store_event
    from mailout.models import Event, EventType, Provider

    with engine.begin() as conn:
        store_event(conn, Event(Provider.POSTMARK, "ev-1", EventType.BOUNCED, "dana@example.com",
                                datetime(2024, 5, 1, tzinfo=UTC), subtype="hard",
                                reason="mailbox_unknown",
                                diagnostic="5.1.1 <dana@example.com> <script>x</script>"),
                    Link(failed_id, "provider_id", "dana@example.com"))
    admin_page = httpx.get(f"{console.url}/messages/{failed_id}", headers=ADMIN).text
    assert 'class="event row-bounced"' in admin_page
    assert '<span class="reason">mailbox_unknown</span>' in admin_page
    assert "&lt;script&gt;x&lt;/script&gt;" in admin_page
    assert "<script>" not in admin_page
    readonly_page = httpx.get(f"{console.url}/messages/{failed_id}", headers=READONLY).text
    assert "d***@example.com" in readonly_page
    assert "dana@example.com" not in readonly_page


def test_events_page_marks_unlinked_bounce_mail_unverified(
    console: ConsoleServer, engine: Engine, failed_id: int,
) -> None:
    from datetime import UTC, datetime

    from mailout.db.delivery_events import Link, store_event
    from mailout.models import Event, EventType, Provider

    with engine.begin() as conn:
        store_event(conn, Event(Provider.POSTMARK, "ev-linked", EventType.BOUNCED,
                                "dana@example.com", datetime(2024, 5, 1, tzinfo=UTC),
                                subtype="hard"), Link(failed_id, "provider_id", "dana@example.com"))
        store_event(conn, Event(Provider.DSN, "ev-forged", EventType.BOUNCED,
                                "billing@bigcustomer.example", datetime(2024, 5, 2, tzinfo=UTC),
                                subtype="hard", reason="mailbox_unknown",
                                diagnostic="5.1.1 <script>x</script>"), None)
    page = httpx.get(f"{console.url}/events", headers=ADMIN).text
    assert f'href="/messages/{failed_id}"' in page
    assert '<span class="unverified">unverified</span>' in page
    assert '<span class="reason">mailbox_unknown</span>' in page
    assert "&lt;script&gt;" in page
    assert "<script>x" not in page
    only = httpx.get(f"{console.url}/events?unlinked=1", headers=ADMIN).text
    assert "billing@bigcustomer.example" in only
    assert "dana@example.com" not in only
    readonly = httpx.get(f"{console.url}/events", headers=READONLY).text
    assert "billing@bigcustomer.example" not in readonly


def test_overview_shows_an_outage_from_the_attempt_log(
    console: ConsoleServer, engine: Engine, failed_id: int,
) -> None:
    from sqlalchemy import insert

    from mailout.db.schema import attempts, db_now

    calm = httpx.get(console.url + "/", headers=ADMIN).text
    assert 'class="ok" id="transport-state"' in calm
    with engine.begin() as conn:
        conn.execute(insert(attempts).values(
            outbox_id=failed_id, attempt=1, outcome="outage", stage="connect", charged=False,
            detail="connection refused <b>", started_at=db_now(), finished_at=db_now()))
    page = httpx.get(console.url + "/", headers=ADMIN).text
    state = re.search(r'id="transport-state">(.*?)</p>', page, re.S)
    assert state is not None
    assert state.group(1).startswith("Outage")
    assert "connection refused &lt;b&gt;" in state.group(1)


def test_actions_on_sqlite_succeed_while_a_worker_keeps_committing(sqlite_url: str) -> None:
    """A deferred SQLite transaction that read before another connection committed
    cannot write: SQLITE_BUSY at once, whatever the busy timeout. A worker commits a
    claim every few milliseconds, so the console's actions (each reads, then writes)
    take the write lock when they begin instead."""
    engine = db.make_engine(sqlite_url)
    with engine.begin() as conn:
        ids = [enqueue(conn, to=f"r{i}@example.com", subject="s", text="t", key=f"k-{i}",
                       settings=ENQUEUE).id for i in range(21)]
        conn.execute(update(messages).where(messages.c.id.in_(ids[1:])).values(status="failed"))
    stop = threading.Event()

    def commit_like_a_worker() -> None:
        other = db.make_engine(sqlite_url)
        n = 0
        while not stop.is_set():
            n += 1
            with db.immediate(other) as conn:
                conn.execute(update(messages).where(messages.c.id == ids[0])
                             .values(priority=n % 100))
            time.sleep(0.001)
        other.dispose()

    churn = threading.Thread(target=commit_like_a_worker)
    with serve_console(sqlite_url) as console:
        churn.start()
        try:
            replies = [httpx.post(f"{console.url}/act", headers=ADMIN,
                                  data={"action": "retry", "id": str(rid)}, timeout=30)
                       for rid in ids[1:]]
        finally:
            stop.set()
            churn.join()
    assert [r.status_code for r in replies] == [303] * 20
    assert {status_of(engine, rid) for rid in ids[1:]} == {"pending"}
    engine.dispose()
