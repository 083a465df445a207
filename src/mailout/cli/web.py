"""``mailout web``: serve the operator console with uvicorn."""

from __future__ import annotations

from typing import Any

import click

from mailout.cli.common import WEB_PORT
from mailout.support.hosts import is_loopback


@click.command("web")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but loopback exposes the console: put it "
                   "behind TLS.")
@click.option("--port", type=click.IntRange(1, 65535), default=WEB_PORT, show_default=True)
@click.option("--no-auth", is_flag=True,
              help="Everyone is admin, no token asked. Local development only: refused "
                   "unless --host is a loopback address.")
@click.pass_obj
def web_cmd(obj: dict[str, Any], host: str, port: int, no_auth: bool) -> None:
    """Serve the web console (needs the mailout[web] extra).

    Sign in with MAILOUT_WEB_TOKEN (admin) or MAILOUT_WEB_READONLY_TOKEN (read-only),
    as a Bearer header or through the login form. MAIL_FROM and MAILOUT_TEMPLATES
    let it render messages and template previews.
    """
    try:
        import uvicorn

        from mailout.web import create_app
    except ImportError as exc:
        raise click.ClickException(f"the web console needs its extra: pip install "
                                   f"'mailout[web]' ({exc.name} is missing)") from None
    if no_auth and not is_loopback(host):
        raise click.UsageError("--no-auth is for local development: use it only with a "
                               "loopback --host (127.0.0.1, ::1, localhost)")
    app = create_app(obj["db_url"], anonymous=no_auth)
    click.echo(f"mailout console on http://{host}:{port}/" + (" (no auth)" if no_auth else ""),
               err=True)
    # No proxy headers: behind a proxy, the client address would be the proxy's anyway,
    # and trusting X-Forwarded-* from anyone would let a client claim any scheme.
    uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False,
                server_header=False)
