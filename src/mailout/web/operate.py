"""Signing in and out, and the console's actions: a confirmation page (GET), then
the change (POST), through :mod:`mailout.db.actions`, the functions the CLI uses,
so every change writes its audit entry in the same transaction.

An action names its messages by id, or by a filter plus the highest id that
existed when the operator confirmed: rows enqueued after the confirmation are
never swept in. One action changes at most :data:`BULK_CAP` rows.
"""

from __future__ import annotations

import enum
import logging
import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from starlette.datastructures import FormData, ImmutableMultiDict
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from mailout import db
from mailout.db import actions, audit, browse, operator
from mailout.db.actions import PauseKind, Resolution
from mailout.db.audit import AuditAction, describe_ids
from mailout.models import Status
from mailout.web import filters
from mailout.web.auth import CSRF_FIELD, Identity, csrf_ok
from mailout.web.console import Console, unauthorized

log = logging.getLogger(__name__)

BULK_CAP = 10_000
MAX_NAME = 100


class Act(enum.StrEnum):
    """The actions the console offers."""

    RETRY = "retry"  # requeue dead, failed, unknown or cancelled rows
    CANCEL = "cancel"  # withdraw pending rows
    RESOLVE_SENT = "resolve_sent"  # unknown rows: the provider confirms delivery
    RESOLVE_RETRY = "resolve_retry"  # unknown rows: not delivered, send again
    PAUSE = "pause"  # stop a queue or template on every worker
    RESUME = "resume"  # undo a pause


# The statuses each message action can change; other rows are skipped.
ACTS_ON = {Act.RETRY: operator.RETRYABLE, Act.CANCEL: frozenset({Status.PENDING}),
           Act.RESOLVE_SENT: frozenset({Status.UNKNOWN}),
           Act.RESOLVE_RETRY: frozenset({Status.UNKNOWN})}
TITLES = {Act.RETRY: "Retry", Act.CANCEL: "Cancel", Act.RESOLVE_SENT: "Resolve as sent",
          Act.RESOLVE_RETRY: "Resolve: send again", Act.PAUSE: "Pause", Act.RESUME: "Resume"}


@dataclass(frozen=True)
class Action:
    """An action as the confirmation page and the POST both understand it."""

    act: Act
    ids: list[int]  # explicit ids, or
    parsed: filters.ParsedFilter | None  # a filter (with ``upto``)
    upto: int | None
    kind: PauseKind | None
    name: str | None
    reason: str | None
    next: str | None

    @property
    def target(self) -> str:
        if self.kind is not None:
            return f"{self.kind.value} {self.name}"
        if self.parsed is not None:
            return f"{self.parsed.filter.describe()} (ids up to {self.upto})"
        return describe_ids(self.ids)


def _parse(values: ImmutableMultiDict[str, Any]) -> Action | str:
    """The action in a query string or form, or what is wrong with it."""
    try:
        act = Act(str(values.get("action", "")))
    except ValueError:
        return "unknown action"
    reason = str(values.get("reason", "")).strip() or None
    nxt = str(values.get("next", "")) or None
    if act in (Act.PAUSE, Act.RESUME):
        try:
            kind = PauseKind(str(values.get("kind", "")))
        except ValueError:
            return "pause what: choose queue or template"
        name = str(values.get("name", "")).strip()
        if not name or len(name) > MAX_NAME or not name.isprintable():
            return f"give the {kind.value}'s name (printable, at most {MAX_NAME} characters)"
        return Action(act, [], None, None, kind, name, reason, nxt)
    if values.get("scope") == "filter":
        parsed = filters.parse(values)
        upto = str(values.get("upto", ""))
        return Action(act, [], parsed, int(upto) if upto.isdigit() else None, None, None,
                        reason, nxt)
    raw = [str(v) for v in values.getlist("id")]
    ids = sorted({int(v) for v in raw if v.isdigit() and len(v) < 19})
    if not ids:
        return "choose at least one message"
    if len(ids) > BULK_CAP:
        return f"at most {BULK_CAP} messages per action"
    return Action(act, ids, None, None, None, None, reason, nxt)


def _selected(conn: Connection, req: Action, upto: int) -> list[int]:
    assert req.parsed is not None
    return browse.matching_ids(conn, req.parsed.filter, ACTS_ON[req.act], upto=upto,
                               limit=BULK_CAP)


def confirm(c: Console, request: Request, me: Identity, _form: FormData | None) -> Response:
    """The confirmation page: what will change, how many rows, and a reason field."""
    req = _parse(request.query_params)
    if isinstance(req, str):
        return c.problem(request, me, 400, req)
    count = len(req.ids)
    upto = req.upto
    if req.parsed is not None:
        with c.engine.connect() as conn:
            upto = browse.newest_id(conn) if upto is None else upto
            count = browse.count_matching(conn, req.parsed.filter, ACTS_ON[req.act], upto=upto,
                                          cap=BULK_CAP)
        req = Action(req.act, [], req.parsed, upto, None, None, req.reason, req.next)
    return c.page(request, me, "confirm.html", req=req, title=TITLES[req.act], count=count,
                  cap=BULK_CAP, acts_on=sorted(s.value for s in ACTS_ON.get(req.act, ())),
                  nav="")


def act(c: Console, request: Request, me: Identity, form: FormData | None) -> Response:
    """Carry out a confirmed action; a one-line outcome is shown on the next page."""
    assert form is not None  # a POST
    req = _parse(form)
    if isinstance(req, str):
        return c.problem(request, me, 400, req)
    # Reads, then writes: on SQLite the write lock is taken first (see db.immediate),
    # or a worker's claim committed in between would fail it with "database is locked".
    with db.immediate(c.engine) as conn:
        outcome = _perform(conn, req, me.actor)
    request.session["flash"] = outcome
    return c.redirect_local(request, req.next, "messages")


def _perform(conn: Connection, req: Action, actor: str) -> str:
    if req.kind is not None and req.name is not None:
        do = actions.pause if req.act is Act.PAUSE else actions.resume
        changed = do(conn, req.kind, req.name, actor=actor, reason=req.reason)
        if req.act is Act.PAUSE:
            state = "paused" if changed else "was already paused"
        else:
            state = "resumed" if changed else "was not paused"
        return f"{req.kind.value} {req.name} {state}"
    ids = req.ids
    if req.parsed is not None:
        if req.upto is None:
            return "the selection was not confirmed: nothing changed"
        ids = _selected(conn, req, req.upto)
    reason, target = req.reason, req.target
    if req.act is Act.RETRY:
        change = actions.retry(conn, ids, actor=actor, reason=reason, target=target)
    elif req.act is Act.CANCEL:
        change = actions.cancel(conn, ids, actor=actor, reason=reason, target=target)
    else:
        how = Resolution.SENT if req.act is Act.RESOLVE_SENT else Resolution.RETRY
        change = actions.resolve(conn, ids, how, actor=actor, reason=reason, target=target)
    skipped = f"; skipped {len(change.skipped)} in another status" if change.skipped else ""
    return f"{TITLES[req.act]}: changed {len(change.changed)}{skipped}"


async def login(request: Request) -> Response:
    """GET: the form. POST: name + token -> a session cookie, or the form again (401)."""
    console: Console = request.app.state.console
    gate = console.gate
    if not gate.uses_login:
        return RedirectResponse(console.url(request, "overview"), 303)
    if request.method != "POST":
        return console.page(request, None, "login.html", next=request.query_params.get("next"),
                            error=None)
    address = request.client.host if request.client else "unknown"
    wait = gate.throttle.wait_for(address)
    if wait > 0:
        log.warning("console: sign-in from %s refused for %.0fs more after repeated "
                    "failures", address, wait, extra={"event": "web_login_throttled",
                                                     "client": address})
        page = console.page(request, None, "login.html", status=429, next=None,
                            error=f"Too many failed sign-ins: wait {math.ceil(wait)} s.")
        page.headers["Retry-After"] = str(math.ceil(wait))
        return page
    form = await request.form()
    nxt = str(form.get("next", "")) or None
    if not csrf_ok(request, None, form.get(CSRF_FIELD)):
        return console.page(request, None, "login.html", status=403, next=nxt,
                            error="The form expired; try again.")
    name = str(form.get("name", "")).strip()[:MAX_NAME]
    role = gate.role_of(str(form.get("token", "")).strip())
    if role is None or not name or not name.isprintable():
        if role is None:
            _failed_sign_in(console, address, name)
        return console.page(request, None, "login.html", status=401, next=nxt,
                            error="Wrong token, or no name given." if role is None or not name
                            else "The name has characters that cannot be shown.")
    gate.throttle.succeeded(address)
    gate.log_in(request, name, role)
    _audit_session(console, f"{name} (web, {role.value})", AuditAction.SIGN_IN, address)
    return console.redirect_local(request, nxt, "overview")


def _failed_sign_in(console: Console, address: str, name: str) -> None:
    count = console.gate.throttle.failed(address)
    log.warning("console: failed sign-in from %s (%d in a row)", address, count,
                extra={"event": "web_login_failed", "client": address, "failures": count})
    _audit_session(console, f"{name or 'unnamed'} (web)", AuditAction.SIGN_IN_FAILED, address)


def _audit_session(console: Console, actor: str, action: AuditAction, address: str) -> None:
    with console.engine.begin() as conn:
        audit.record(conn, actor=actor, action=action, target=f"from {address}",
                     changed_count=0)


async def logout(request: Request) -> Response:
    console: Console = request.app.state.console
    identity = console.gate.identify(request)
    if identity is None:
        return unauthorized(console, request)
    form = await request.form()
    if not csrf_ok(request, identity, form.get(CSRF_FIELD)):
        return console.problem(request, identity, 403, "CSRF check failed.")
    console.gate.log_out(request)
    address = request.client.host if request.client else "unknown"
    _audit_session(console, identity.actor, AuditAction.SIGN_OUT, address)
    return RedirectResponse(console.url(request, "login"), 303)
