"""Helpers to run real workers against test servers: in-process or as processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.support.smtpserver import SmtpTestServer
from mailout.support.alerts import Alert
from mailout.worker import config
from mailout.worker.build import build_worker
from mailout.worker.config import Settings
from mailout.worker.runtime import Worker

MAIL_FROM = "Shop <shop@example.com>"


def worker_env(db_url: str, server: SmtpTestServer, **extra: Any) -> dict[str, str]:
    """Environment for a worker that sends to ``server`` (plain SMTP) from ``db_url``."""
    env = {
        "MAILOUT_DATABASE_URL": db_url,
        "MAIL_FROM": MAIL_FROM,
        "SMTP_HOST": server.host,
        "SMTP_PORT": str(server.port),
        "SMTP_TLS": "none" if server.tls_context is None else "starttls",
        "SMTP_TIMEOUT": "3",
        "MAILOUT_LEASE_SECONDS": "20",
        "MAILOUT_POLL_SECONDS": "0.2",
    }
    if server.ca_file:
        env["SMTP_CA_FILE"] = str(server.ca_file)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def settings_for(db_url: str, server: SmtpTestServer, **extra: Any) -> Settings:
    return config.load(env=worker_env(db_url, server, **extra))


def run_until_idle(settings: Settings, alerts: list[Alert] | None = None, **kw: Any) -> Worker:
    """Run one in-process worker until nothing is due; returns it for inspection."""
    worker = build_worker(settings, until_idle=True, alert_callback=_collector(alerts), **kw)
    try:
        asyncio.run(worker.run())
    finally:
        worker.alerts.close()
        worker.engine.dispose()
    return worker


def _collector(alerts: list[Alert] | None) -> Any:
    return None if alerts is None else alerts.append


def spawn_worker(
    env: Mapping[str, str], *args: str, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``mailout worker`` as a real process (it can be killed for real)."""
    exe = Path(sys.executable).parent / "mailout"
    full_env = {**os.environ, **env}
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
    return subprocess.Popen(
        [str(exe), "-v", "worker", *args], env=full_env, stdout=out, stderr=subprocess.STDOUT
    )
