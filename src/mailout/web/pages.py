"""The console's read-only pages: overview, messages, message detail (with the
rendered e-mail), audit log and template previews.

Every read goes through :mod:`mailout.db` (the same functions as ``mailout
status``, ``list`` and ``show``). The rendered HTML of an e-mail is served on its
own URL, for a sandboxed iframe, with a CSP that forbids scripts and (unless the
viewer asks for remote images) every remote load.
"""

from __future__ import annotations

from datetime import timedelta

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from mailout.db import audit, browse, operator, outages, pauses, series
from mailout.db.delivery_events import MAIL_REPORT_PROVIDERS, events_for, list_events
from mailout.message.templates import template_exists
from mailout.models import Status
from mailout.web import filters, mailview
from mailout.web.auth import Identity
from mailout.web.console import Console
from mailout.web.security import email_headers

CHART_OUTCOMES = ("sent", "retry", "failed", "dead")
PAGE_SIZE = 50


def overview(c: Console, request: Request, me: Identity, _form: FormData | None) -> Response:
    with c.engine.connect() as conn:
        report = operator.status(conn)
        switches = pauses.list_pauses(conn)
        hour = series.activity(conn, CHART_OUTCOMES, span=timedelta(hours=1), buckets=12)
        day = series.activity(conn, CHART_OUTCOMES, span=timedelta(days=1), buckets=24)
        trouble = outages.transport_trouble(conn)
    return c.page(request, me, "overview.html", report=report, pauses=switches,
                  charts=[("Last hour", "5-minute steps", hour), ("Last 24 hours", "hourly", day)],
                  outcomes=CHART_OUTCOMES, trouble=trouble, nav="overview")


def _cursor(request: Request, key: str) -> int | None:
    value = request.query_params.get(key, "")
    return int(value) if value.isdigit() and len(value) < 19 else None


def messages(c: Console, request: Request, me: Identity, _form: FormData | None) -> Response:
    parsed = filters.parse(request.query_params, sees_addresses=me.sees_personal)
    before, after = _cursor(request, "before"), _cursor(request, "after")
    with c.engine.connect() as conn:
        page = browse.browse(conn, parsed.filter, before=before,
                             after=None if before is not None else after, limit=PAGE_SIZE)
        queues = browse.distinct_values(conn, "queue")
        templates = browse.distinct_values(conn, "template")
    return c.page(request, me, "messages.html", page=page, parsed=parsed,
                  query=parsed.query(), queues=queues, templates=templates,
                  statuses=list(Status), nav="messages")


def _message_id(request: Request) -> int:
    return int(request.path_params["message_id"])


def message(c: Console, request: Request, me: Identity, _form: FormData | None) -> Response:
    rid = _message_id(request)
    with c.engine.connect() as conn:
        found = operator.find(conn, str(rid))
        if found is None:
            return c.problem(request, me, 404, f"No message {rid}.")
        msg, _how = found
        attempts = operator.attempt_log(conn, rid)
        history = audit.for_message(conn, rid)
        events = events_for(conn, rid)
        content = browse.renderable(conn, rid) if me.sees_personal else None
    view = mailview.render(c.renderer, content) if content is not None else None
    return c.page(request, me, "message.html", msg=msg, attempts=attempts, history=history,
                  events=events, view=view, remote=request.query_params.get("remote") == "1",
                  nav="messages")


def _render_stored(c: Console, me: Identity, rid: int) -> mailview.MailView | None:
    if not me.sees_personal:
        return None
    with c.engine.connect() as conn:
        content = browse.renderable(conn, rid)
    return None if content is None else mailview.render(c.renderer, content)


def message_html(c: Console, request: Request, me: Identity, _form: FormData | None) -> Response:
    """The HTML part alone, for the sandboxed iframe."""
    view = _render_stored(c, me, _message_id(request))
    return _html_part(request, view)


def _html_part(request: Request, view: mailview.MailView | None) -> Response:
    remote = request.query_params.get("remote") == "1"
    if view is None or view.html is None:
        body = "(no HTML part)" if view is not None and view.error is None else "(not available)"
        return Response(body, media_type="text/plain; charset=utf-8",
                        headers=email_headers(remote=False))
    return Response(view.html, media_type="text/html; charset=utf-8",
                    headers=email_headers(remote=remote))


def message_eml(c: Console, request: Request, me: Identity, _form: FormData | None) -> Response:
    rid = _message_id(request)
    view = _render_stored(c, me, rid)
    if view is None or view.error is not None:
        return c.problem(request, me, 404 if view is None else 422,
                         view.error if view is not None and view.error else
                         "This message cannot be downloaded by your role, or is gone.")
    return Response(view.wire, media_type="message/rfc822", headers={
        "Content-Disposition": f'attachment; filename="message-{rid}.eml"',
        "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff",
    })


def audit_log(c: Console, request: Request, me: Identity, _form: FormData | None) -> Response:
    before = _cursor(request, "before")
    with c.engine.connect() as conn:
        rows = audit.entries(conn, before=before, limit=PAGE_SIZE + 1)
    older = rows[PAGE_SIZE - 1].id if len(rows) > PAGE_SIZE else None
    return c.page(request, me, "audit.html", entries=rows[:PAGE_SIZE], older=older,
                  first=before is None, nav="audit")


def delivery_events(c: Console, request: Request, me: Identity,
                    _form: FormData | None) -> Response:
    """The newest delivery events; ``?unlinked=1``: only those linked to no message
    (bounce mail and complaints among them are unverified: they acted on nothing)."""
    unlinked = request.query_params.get("unlinked") == "1"
    with c.engine.connect() as conn:
        rows = list_events(conn, unmatched=unlinked, limit=PAGE_SIZE)
    return c.page(request, me, "events.html", events=rows, unlinked=unlinked,
                  mail_reports=MAIL_REPORT_PROVIDERS, nav="events")


def templates(c: Console, request: Request, me: Identity, _form: FormData | None) -> Response:
    listing = mailview.list_templates(c.settings.templates_dir)
    return c.page(request, me, "templates.html", listing=listing,
                  templates_dir=c.settings.templates_dir, nav="templates")


def _preview(c: Console, request: Request) -> tuple[str, str, mailview.MailView] | str:
    """(template, sample, rendered) or why not. Renders in memory: nothing is stored."""
    name = request.path_params["name"]
    if c.settings.templates_dir is None:
        return "no templates folder is configured (MAILOUT_TEMPLATES)"
    try:
        previews = mailview.load_previews(c.settings.templates_dir, name)
    except ValueError as exc:
        return str(exc)
    if not template_exists(c.settings.templates_dir, name):
        return f"no template {name!r}"
    sample = request.query_params.get("sample", "")
    if previews.problem:
        return f"template {name!r}: {previews.problem}"
    if sample not in previews.samples:
        sample = next(iter(previews.samples))
    msg = mailview.preview_message(name, sample, previews.samples[sample])
    return name, sample, mailview.render(c.renderer, msg)


def template_preview(c: Console, request: Request, me: Identity,
                     _form: FormData | None) -> Response:
    found = _preview(c, request)
    if isinstance(found, str):
        return c.problem(request, me, 404, found)
    name, sample, view = found
    assert c.settings.templates_dir is not None  # _preview checked
    samples = list(mailview.load_previews(c.settings.templates_dir, name).samples)
    return c.page(request, me, "preview.html", name=name, sample=sample, samples=samples,
                  view=view, remote=request.query_params.get("remote") == "1", nav="templates")


def template_html(c: Console, request: Request, me: Identity, _form: FormData | None) -> Response:
    found = _preview(c, request)
    return _html_part(request, None if isinstance(found, str) else found[2])
