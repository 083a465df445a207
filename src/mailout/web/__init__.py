"""The operator web console: ``mailout web``, or :func:`create_app` mounted in a host
Starlette/FastAPI application.

Owns the console's HTTP layer: authentication (tokens, sessions, roles, CSRF),
security headers, pages, forms and their templates, server-drawn SVG charts, and
showing a rendered e-mail or a template preview. It holds no SQL and no operator
logic of its own: it reads and changes the outbox only through ``mailout.db``
(``operator``, ``browse``, ``series``, ``audit``, ``actions``), the functions the CLI
uses, and renders through :class:`mailout.message.render.Renderer`.

May import: ``mailout.db``, ``mailout.message.render``, ``mailout.message.templates``,
``mailout.models``, ``mailout.exceptions``, ``mailout.support``;
Starlette, Jinja2 and itsdangerous (the ``mailout[web]`` extra). Never imports the
worker, the worker's config, the SMTP transport, the metrics, enqueue or the CLI
(a test enforces it). Nothing else in mailout imports this package
(the CLI loads it only for ``mailout web``).
"""

from __future__ import annotations

from mailout.web.app import create_app
from mailout.web.auth import Identity, Role
from mailout.web.settings import WebSettings

__all__ = ["Identity", "Role", "WebSettings", "create_app"]
