"""``mailout check``: is the database ready, does the transport work?

Each check returns ``(ok, line)``: a verdict and one sentence in plain words saying
what is wrong and which setting to look at. Checks never raise for the problem they
look for, and never print a secret. What "the transport works" means is each
transport's own business (:meth:`Transport.check`); this module only asks.
"""

from __future__ import annotations

import asyncio

from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from mailout import db
from mailout.db import migrate
from mailout.exceptions import MailoutError
from mailout.transports.url import TransportSpec

Verdict = tuple[bool, str]


def check_database(url: str | None) -> Verdict:
    """The database answers and is at the newest migration."""
    try:
        resolved = db.database_url(url)
        shown = make_url(resolved).render_as_string(hide_password=True)
        engine = db.make_engine(resolved)
    except MailoutError as exc:
        return False, f"database: {exc}"
    try:
        migrate.require_schema(engine)
        return True, f"database {shown}: reachable, at revision {migrate.current_revision(engine)}"
    except MailoutError as exc:  # SchemaMissing says which command fixes it
        return False, f"database {shown}: {exc}"
    except (OperationalError, DBAPIError) as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
        return False, (f"database {shown}: cannot connect ({reason}). "
                       "Check MAILOUT_DATABASE_URL / --db and that the server is up.")
    finally:
        engine.dispose()


def check_transport(spec: TransportSpec) -> tuple[bool, str, tuple[str, ...]]:
    """Build the transport and ask it to check its connection and credentials; send
    nothing. A transport that cannot even be built (an unreadable CA file...) fails.
    Also returns its warnings (an EHLO name that is not a fully qualified one)."""
    try:
        transport = spec.build(1)
    except ImportError as exc:
        return False, (f"{spec.name} transport {spec.shown}: a library is missing ({exc.name});"
                       " install mailout[http] (or mailout[ses] for ses://)"), ()
    except (OSError, ValueError) as exc:
        return False, f"{spec.name} transport {spec.shown}: cannot be set up: {exc}", ()

    async def run() -> tuple[bool, str, tuple[str, ...]]:
        try:
            result = await transport.check()
        finally:
            await transport.close()
        return result.ok, result.line, result.warnings

    return asyncio.run(run())
