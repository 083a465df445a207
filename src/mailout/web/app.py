"""Building the console's ASGI application."""

from __future__ import annotations

from pathlib import Path

import jinja2
from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from mailout import db
from mailout.db import migrate
from mailout.exceptions import ConfigError
from mailout.web import mailview, operate, pages, present
from mailout.web.auth import Authenticate, Gate
from mailout.web.console import Console, handle
from mailout.web.security import AllowedHosts, BodyLimit, SecurityHeaders
from mailout.web.settings import TOKEN_ENV, WebSettings

HERE = Path(__file__).parent
SESSION_COOKIE = "mailout_session"


def create_app(
    database: str | Engine | None = None,
    *,
    settings: WebSettings | None = None,
    authenticate: Authenticate | None = None,
    anonymous: bool = False,
) -> Starlette:
    """The console as an ASGI app, to serve or to mount in a host app::

        app.mount("/mailout", create_app(engine, authenticate=my_auth))

    ``database`` is an engine or a URL (default ``MAILOUT_DATABASE_URL``);
    ``settings`` default to :meth:`WebSettings.from_env`. Authentication, in this
    order: ``authenticate(request) -> Identity | None`` (the host app's own auth:
    None answers 401), else ``anonymous=True`` (everyone is admin: local
    development only), else the tokens in ``settings``.

    Raises ConfigError when no way to authenticate is configured, SchemaMissing
    when the database is not migrated to this version.
    """
    settings = settings or WebSettings.from_env()
    if authenticate is None and not anonymous and not settings.has_tokens:
        raise ConfigError(TOKEN_ENV, "set it (and optionally MAILOUT_WEB_READONLY_TOKEN), "
                                     "or pass an authenticate hook when mounting the console")
    engine = database if isinstance(database, Engine) else db.make_engine(database)
    migrate.require_schema(engine)
    gate = Gate(settings, anonymous=anonymous, authenticate=authenticate)
    console = Console(
        engine=engine, settings=settings, gate=gate,
        templates=present.environment(jinja2.FileSystemLoader(HERE / "templates")),
        renderer=mailview.renderer_for(settings),
    )
    # A host app that mounts the console behind its own auth answers to its own names.
    hosts = [] if authenticate is not None else [Middleware(AllowedHosts, hosts=settings.hosts)]
    app = Starlette(routes=_routes(), middleware=[
        *hosts,
        Middleware(BodyLimit),
        Middleware(SecurityHeaders),
        Middleware(SessionMiddleware, secret_key=gate.secret,
                   session_cookie=SESSION_COOKIE, max_age=settings.session_seconds,
                   same_site="strict", https_only=settings.secure_cookie),
    ])
    app.state.console = console
    return app


def _routes() -> list[Route | Mount]:
    get, post = ["GET"], ["POST"]
    return [
        Route("/", handle(pages.overview), methods=get, name="overview"),
        Route("/messages", handle(pages.messages), methods=get, name="messages"),
        Route("/messages/{message_id:int}", handle(pages.message), methods=get, name="message"),
        Route("/messages/{message_id:int}/body.html", handle(pages.message_html), methods=get,
              name="message_html"),
        Route("/messages/{message_id:int}/message.eml", handle(pages.message_eml),
              methods=get, name="message_eml"),
        Route("/audit", handle(pages.audit_log), methods=get, name="audit"),
        Route("/events", handle(pages.delivery_events), methods=get, name="events"),
        Route("/templates", handle(pages.templates), methods=get, name="templates"),
        Route("/templates/{name}", handle(pages.template_preview), methods=get,
              name="template"),
        Route("/templates/{name}/body.html", handle(pages.template_html), methods=get,
              name="template_html"),
        Route("/confirm", handle(operate.confirm, act=True), methods=get, name="confirm"),
        Route("/act", handle(operate.act, act=True), methods=post, name="act"),
        Route("/login", operate.login, methods=["GET", "POST"], name="login"),
        Route("/logout", operate.logout, methods=post, name="logout"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
