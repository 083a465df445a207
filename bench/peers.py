"""Peers: mailout against django-post-office and django-mailer, side by side in one run.

Each peer runs in its own virtualenv (made by this script under ``.bench-peers/``,
from PyPI), in a throwaway Django project on the same PostgreSQL server and the same
Postfix ``smtp-sink`` as mailout, draining the same messages: mailout's benchmark
template (subject, ~2 KB text, ~2 KB HTML) rendered once, and the same bodies queued
in each peer (``--body short``: a subject and one line of text, no HTML). Rounds are
interleaved (mailout, post-office, mailer, mailout, ...) and medians reported, because
this machine is shared and noisy.

- mailout: ``mailout worker --until-idle``, one process.
- django-post-office: ``manage.py send_queued_mail --processes 1`` with BATCH_SIZE
  1000. One process is its best configuration: with ``--processes N`` it forks a pool
  per batch, which was slower.
- django-mailer: ``manage.py send_mail`` (its only mode: one process, one connection).

Each drain's CPU is the process's user + system time from wait4, less the same
command's CPU on an empty queue (imports and setup), divided by the messages sent.

    .venv/bin/python -m bench.peers [-n 5000] [--rounds 3] [--body template|short]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from bench.common import (
    Body,
    run_workers,
    scratch_database,
    smtp_sink,
    worker_env,
    write_templates,
)
from bench.throughput import fill, raw_smtp, rendered, reset
from mailout import db
from mailout.db import migrate

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".bench-peers" / "venv"
PEER_PACKAGES = ["django>=5.2,<6", "django-post-office==3.12.0", "django-mailer==2.3.2",
                 "psycopg[binary]>=3.1"]
PEERS = ("post_office", "mailer")


@dataclass
class Drain:
    who: str
    rate: float  # msg/s, process start to exit
    cpu_per_message: float  # seconds


def peer_python() -> Path:
    """The peers' virtualenv's python, created on first use."""
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {VENV} (django-post-office, django-mailer)...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    return python


SETTINGS = """
SECRET_KEY = "bench"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", {app!r}]
DATABASES = {{"default": {{"ENGINE": "django.db.backends.postgresql", "NAME": {name!r},
    "USER": {user!r}, "HOST": {host!r}, "PORT": {port!r}}}}}
EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
EMAIL_HOST = "127.0.0.1"
EMAIL_PORT = {smtp_port}
POST_OFFICE = {{"BATCH_SIZE": 1000, "LOG_LEVEL": 0,
               "BACKENDS": {{"default": "django.core.mail.backends.smtp.EmailBackend"}}}}
MAILER_USE_FILE_LOCK = False
TEMPLATES = [{{"BACKEND": "django.template.backends.django.DjangoTemplates"}}]
LOGGING_CONFIG = None
"""

ENQUEUE = """
import json, sys, django
django.setup()
messages = json.load(open(sys.argv[1]))
if sys.argv[2] == "post_office":
    from post_office import mail
    mail.send_many([dict(sender=m["from"], recipients=[m["to"]], subject=m["subject"],
                         message=m["text"], html_message=m["html"] or "") for m in messages])
else:
    from mailer import send_html_mail, send_mail
    for m in messages:
        if m["html"]:
            send_html_mail(m["subject"], m["text"], m["html"], m["from"], [m["to"]])
        else:
            send_mail(m["subject"], m["text"], m["from"], [m["to"]])
"""

COMMAND = {"post_office": ["send_queued_mail", "--processes", "1"], "mailer": ["send_mail"]}


def project(tmp: Path, app: str, url: str, smtp_port: int) -> dict[str, str]:
    """A Django project for ``app`` on database ``url``; returns its environment."""
    where = tmp / app
    where.mkdir()
    u = make_url(url)
    (where / "bench_settings.py").write_text(SETTINGS.format(
        app=app, name=u.database, user=u.username or "postgres", host=u.host or "127.0.0.1",
        port=str(u.port or 5432), smtp_port=smtp_port))
    (where / "enqueue.py").write_text(ENQUEUE)
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "bench_settings", "PYTHONPATH": str(where)}


def manage(python: Path, env: dict[str, str], *args: str) -> tuple[float, float]:
    """Run ``django-admin args``; (wall seconds, CPU seconds of the process)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(python), "-m", "django", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"django-admin {' '.join(args)} failed: {proc.stderr.read()!r}"
                           if proc.stderr else "failed")
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def peer_drain(python: Path, env: dict[str, str], app: str, batch_file: Path,
               n: int) -> Drain:
    queued = subprocess.run([str(python), str(Path(env["PYTHONPATH"]) / "enqueue.py"),
                             str(batch_file), app], env=env, capture_output=True, text=True,
                            check=False)
    if queued.returncode != 0:
        raise RuntimeError(f"queueing for {app} failed:\n{queued.stderr[-2000:]}")
    wall, cpu = manage(python, env, *COMMAND[app])
    _, idle_cpu = manage(python, env, *COMMAND[app])  # the queue is empty now
    return Drain(app, n / wall, max(0.0, cpu - idle_cpu) / n)


def mailout_drain(engine_url: str, port: int, templates: Path, n: int, body: Body) -> Drain:
    engine = db.make_engine(engine_url)
    reset(engine)
    fill(engine, n, templates, f"peers{time.monotonic_ns()}", body)
    env = worker_env(engine_url, port, templates, 50)
    run = run_workers(env, 1)
    idle = run_workers(env, 1).cpu[0]
    engine.dispose()
    return Drain("mailout", n / run.wall, max(0.0, run.cpu[0] - idle) / n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--body", type=Body, choices=list(Body), default=Body.TEMPLATE,
                    help="template (subject, ~2 KB text, ~2 KB HTML; the default) or short "
                         "(a subject and one line of text)")
    args = ap.parse_args()
    python = peer_python()
    results: dict[str, list[Drain]] = {}
    with tempfile.TemporaryDirectory() as tmp_name, smtp_sink() as port, \
            scratch_database() as m_url, scratch_database() as po_url, \
            scratch_database() as ml_url:
        tmp = Path(tmp_name)
        templates = write_templates(tmp / "templates")
        migrate.upgrade(db.make_engine(m_url))
        envelopes = rendered(args.n, templates, args.body)
        batch_file = tmp / "batch.json"
        batch_file.write_text(json.dumps([
            {"from": "shop@example.com", "to": e.recipients[0], "subject": e.subject,
             "text": e.text, "html": e.html} for e in envelopes]))
        envs = {"post_office": project(tmp, "post_office", po_url, port),
                "mailer": project(tmp, "mailer", ml_url, port)}
        for env in envs.values():
            manage(python, env, "migrate", "-v", "0")
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}...", flush=True)
            results.setdefault("mailout", []).append(
                mailout_drain(m_url, port, templates, args.n, args.body))
            for app, env in envs.items():
                results.setdefault(app, []).append(peer_drain(python, env, app, batch_file,
                                                              args.n))
        raw_rate, raw_cpu = raw_smtp(port, [(e.mail_from, e.recipients[0], e.wire)
                                            for e in envelopes])
    report(args, results, raw_rate, raw_cpu)


def report(args: argparse.Namespace, results: dict[str, list[Drain]], raw_rate: float,
           raw_cpu: float) -> None:
    def med(who: str) -> tuple[float, float]:
        runs = results[who]
        return (statistics.median(d.rate for d in runs),
                statistics.median(d.cpu_per_message for d in runs))

    po_rate, po_cpu = med("post_office")
    print(f"\n{args.n} {args.body} messages per drain, {args.rounds} interleaved rounds, medians; "
          "same PostgreSQL, same smtp-sink, same bodies")
    print(f"{'':<34}{'msg/s':>8}{'CPU/msg':>10}{'rate vs post-office':>21}{'vs raw':>8}")
    for who, label in (("mailout", "mailout, 1 process"),
                       ("post_office", "django-post-office, 1 process"),
                       ("mailer", "django-mailer")):
        rate, cpu = med(who)
        print(f"{label:<34}{rate:>8.0f}{cpu * 1e6:>8.0f}us{rate / po_rate:>20.2f}x"
              f"{rate / raw_rate:>8.0%}")
    print(f"{'raw smtplib, 1 connection, no DB':<34}{raw_rate:>8.0f}{raw_cpu * 1e6:>8.0f}us"
          f"{raw_rate / po_rate:>20.2f}x{'100%':>8}")
    m_rate, m_cpu = med("mailout")
    print(f"\nmailout / post-office: {m_rate / po_rate:.2f}x the rate, "
          f"{po_cpu / m_cpu:.2f}x less CPU per message (target >= 4x)")


if __name__ == "__main__":
    main()
