"""The console's shared machinery: the request wrapper that authenticates, checks
CSRF and roles and moves database work off the event loop, and page rendering
with the context every template gets.

Handlers are plain functions ``(console, request, identity, form) -> Response``
that run in a worker thread, so they may use the synchronous database API.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import jinja2
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from mailout.message.render import Renderer
from mailout.web.auth import CSRF_FIELD, Gate, Identity, csrf_ok, csrf_token
from mailout.web.settings import WebSettings

Handler = Callable[["Console", Request, Identity, FormData | None], Response]
# A path inside the app: one slash, then no slash or backslash (//host and /\host are
# other hosts to a browser), and no space, control character or backslash anywhere
# (browsers drop tabs and newlines, so "/<TAB>/evil.example" is //evil.example).
_LOCAL_PATH = re.compile(r"/(?![/\\])[^\x00-\x20\x7f-\x9f\\]*")
# Pages hold addresses and message content: never keep them in a shared cache.
_NO_STORE = {"Cache-Control": "no-store"}


@dataclass
class Console:
    """Everything a handler needs; one per app."""

    engine: Engine
    settings: WebSettings
    gate: Gate
    templates: jinja2.Environment
    renderer: Renderer | None

    def url(self, request: Request, route: str, query: Mapping[str, Any] | None = None,
            /, **path: Any) -> str:
        """The path of route ``route`` under wherever the app is mounted, with a query
        string (list values repeat the key; None and "" are left out)."""
        root: str = request.scope.get("root_path", "")
        base = root + str(request.app.url_path_for(route, **path))
        return base + query_string(query) if query else base

    def page(self, request: Request, identity: Identity | None, template: str, *,
             status: int = 200, **context: Any) -> HTMLResponse:
        """Render ``template`` with the common context (identity, CSRF token, links)."""
        flash = request.session.pop("flash", None) if identity is not None else None
        context.setdefault("nav", "")
        html = self.templates.get_template(template).render(
            request=request, me=identity, csrf=csrf_token(request), csrf_field=CSRF_FIELD,
            url=lambda route, query=None, /, **path: self.url(request, route, query, **path),
            local_url=lambda target, fallback: self.local_url(request, target, fallback),
            flash=flash, login_form=self.gate.uses_login, **context,
        )
        return HTMLResponse(html, status_code=status, headers=_NO_STORE)

    def problem(self, request: Request, identity: Identity | None, status: int,
                message: str) -> HTMLResponse:
        return self.page(request, identity, "problem.html", status=status, message=message)

    def local_url(self, request: Request, target: str | None, fallback: str) -> str:
        """``target`` under the app's root if it is a path inside the app, else route
        ``fallback``: the one check for every ``next`` (redirects and Back links)."""
        if target and _LOCAL_PATH.fullmatch(target):
            return str(request.scope.get("root_path", "")) + target
        return self.url(request, fallback)

    def redirect_local(self, request: Request, target: str | None, fallback: str) -> Response:
        """303 to ``target`` if it is a path inside the app, else to route ``fallback``."""
        return RedirectResponse(self.local_url(request, target, fallback), 303)


def query_string(query: Mapping[str, Any]) -> str:
    pairs: list[tuple[str, str]] = []
    for key, value in query.items():
        for v in value if isinstance(value, list | tuple) else [value]:
            if v is not None and v != "":
                pairs.append((key, str(v)))
    return "?" + urlencode(pairs) if pairs else ""


def unauthorized(console: Console, request: Request) -> Response:
    """401: the login form for a person, a Bearer challenge for a script."""
    headers = {"WWW-Authenticate": 'Bearer realm="mailout"', **_NO_STORE}
    if console.gate.uses_login:
        response: Response = console.page(request, None, "login.html", status=401,
                                          next=request.url.path, error=None)
    else:
        response = HTMLResponse("authentication required", status_code=401)
    response.headers.update(headers)
    return response


def handle(handler: Handler, *, act: bool = False) -> Callable[[Request], Any]:
    """Wrap ``handler``: 401 without an identity, 403 for a failed CSRF check on a
    POST or for a role that may not act (``act=True``), then run it in a thread."""
    async def endpoint(request: Request) -> Response:
        console: Console = request.app.state.console
        identity = console.gate.identify(request)
        if identity is None:
            return unauthorized(console, request)
        form = None
        if request.method == "POST":
            form = await request.form()
            if not csrf_ok(request, identity, form.get(CSRF_FIELD)):
                return console.problem(request, identity, 403,
                                       "The form was stale or did not come from this console "
                                       "(CSRF check failed). Reload the page and try again.")
        if act and not identity.can_act:
            return console.problem(request, identity, 403,
                                   "The read-only role can see everything but change nothing.")
        return await run_in_threadpool(handler, console, request, identity, form)

    return endpoint
