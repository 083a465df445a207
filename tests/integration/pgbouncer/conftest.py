"""A real PgBouncer (transaction mode, :data:`~tests.support.pgbouncer.POOL_SIZE`
server connections) in front of the test PostgreSQL, shared by this directory's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import pgbouncer


@pytest.fixture(scope="session")
def bouncer(pg_server_url: str, pg_database_url: str) -> Iterator[pgbouncer.PgBouncer]:
    if pgbouncer.binary() is None:
        pytest.skip(pgbouncer.SKIP_REASON)
    with pgbouncer.pgbouncer_in_front(pg_server_url, pg_database_url) as running:
        yield running


@pytest.fixture
def bounced_url(bouncer: pgbouncer.PgBouncer, pg_url: str,
                monkeypatch: pytest.MonkeyPatch) -> str:
    """The migrated, empty test database reached through PgBouncer, with
    ``MAILOUT_PGBOUNCER=transaction`` set (for this process and the workers it starts)."""
    monkeypatch.setenv("MAILOUT_PGBOUNCER", "transaction")
    return bouncer.url(pg_url)
