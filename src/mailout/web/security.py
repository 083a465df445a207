"""Security headers: one policy for the console's pages, a stricter one for the
rendered e-mails shown in their sandboxed iframe.

The console itself runs no script at all (``script-src 'none'``): its forms are
plain HTML, its charts server-drawn SVG. So even a value that escaped escaping
could not run.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONSOLE_CSP = (
    "default-src 'none'; script-src 'none'; style-src 'self'; img-src 'self' data:; "
    "frame-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
# A rendered e-mail: inline styles and embedded images only, no scripts, no fetches,
# no forms, no plugins; "sandbox" also applies when the URL is opened on its own.
EMAIL_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data: cid:; font-src data:; "
    "frame-ancestors 'self'; base-uri 'none'; form-action 'none'; sandbox"
)
EMAIL_CSP_REMOTE = EMAIL_CSP.replace("img-src data: cid:", "img-src data: cid: https: http:")

COMMON = {
    "X-Content-Type-Options": "nosniff",
    # Not "no-referrer": with it, browsers send "Origin: null" on the console's own
    # form posts, and the CSRF check could no longer tell them from a sandboxed
    # frame's. Console URLs still never reach another site.
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
CONSOLE_HEADERS = {"Content-Security-Policy": CONSOLE_CSP, "X-Frame-Options": "DENY", **COMMON}


def email_headers(*, remote: bool) -> dict[str, str]:
    """Headers for a rendered e-mail's HTML: framable by the console only, and no
    referrer at all for the remote images it may load."""
    return {**COMMON, "Content-Security-Policy": EMAIL_CSP_REMOTE if remote else EMAIL_CSP,
            "X-Frame-Options": "SAMEORIGIN", "Cache-Control": "no-store",
            "Referrer-Policy": "no-referrer"}


class SecurityHeaders:
    """ASGI middleware: every response gets the console's headers, except those a
    handler set itself (the e-mail HTML sets its own CSP and frame options)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in CONSOLE_HEADERS.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)


def host_name(header: str) -> str:
    """The name part of a ``Host`` header: no port, no brackets, lower case, no final
    dot (``[::1]:8126`` gives ``::1``, ``Shop.Example.:443`` gives ``shop.example``)."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else ""
    return value.rpartition(":")[0].rstrip(".") if ":" in value else value.rstrip(".")


class AllowedHosts:
    """ASGI middleware: a request whose ``Host`` is not one of ``hosts`` gets 400 and
    reaches nothing. It stops DNS rebinding, where a page under the attacker's name
    resolves to 127.0.0.1: its requests carry that name as Host, and as Origin."""

    def __init__(self, app: ASGIApp, hosts: tuple[str, ...]) -> None:
        self.app = app
        self.hosts = frozenset(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if host_name(raw) not in self.hosts:
                await PlainTextResponse("unknown host name: set MAILOUT_WEB_HOSTS",
                                        status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


# The largest request body the console reads: its biggest form is a bulk action
# naming up to 10,000 ids (about 100 KB). Anything larger is refused before a byte of
# it is parsed, by Content-Length or, for a chunked body, as it arrives.
MAX_BODY = 256 * 1024


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413 and is never
    parsed (a multipart login POST was written to a temporary file before any check)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.limit:
            await _too_large(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise BodyTooLarge
            return message

        try:
            await self.app(scope, counted, send)
        except BodyTooLarge:
            await _too_large(scope, receive, send)


class BodyTooLarge(Exception):
    """A chunked body ran past the limit while it was read."""


async def _too_large(scope: Scope, receive: Receive, send: Send) -> None:
    await PlainTextResponse("request body too large", status_code=413,
                            headers={"Connection": "close"})(scope, receive, send)
