"""Instructions per message of a whole worker drain, counted by valgrind: a figure the
load of a shared machine cannot move, for before/after comparisons.

For each source tree given (``src/`` of this checkout, of a worktree of an earlier
commit...), ``mailout worker --until-idle`` from that tree runs under
``valgrind --tool=callgrind`` twice against PostgreSQL and ``smtp-sink``: on an
empty queue, then on N template messages (``--body short``: N short ones). The
difference divided by N is what one message costs: rendering, MIME, SMTP, the event
loop, the database client, logging; start-up is taken off. PostgreSQL's own work is
not counted (another process). Under valgrind a worker runs about 50 times slower, so
N stays small.

    .venv/bin/python -m bench.instructions [-n 2000] SRC [SRC ...]
    .venv/bin/python -m bench.instructions src /path/to/older/checkout/src
    .venv/bin/python -m bench.instructions src src:bench/support/otel_sdk   # an OTel SDK
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.common import (
    Body,
    callgrind,
    scratch_database,
    smtp_sink,
    worker_env,
    write_templates,
)
from bench.throughput import analyze, fill, reset
from mailout import db
from mailout.db import migrate


def instructions(env: dict[str, str], out: Path) -> int:
    """Instructions of one ``mailout worker --until-idle`` run under callgrind."""
    return callgrind(["-m", "mailout", "worker", "--until-idle"], env, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="messages per drain (default 2000)")
    ap.add_argument("src", nargs="+", help="source trees whose worker to count")
    ap.add_argument("--body", type=Body, choices=list(Body), default=Body.TEMPLATE,
                    help="template (the default) or short (a subject and one line of text)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    results = []
    with tempfile.TemporaryDirectory() as tmp, scratch_database() as url, \
            smtp_sink() as port:
        templates = write_templates(Path(tmp))
        engine = db.make_engine(url)
        migrate.upgrade(engine)
        for i, src in enumerate(args.src):
            # A tree may be several folders (src:bench/support/otel_sdk), as PYTHONPATH.
            path = os.pathsep.join(str(Path(p).resolve()) for p in src.split(os.pathsep))
            env = {**worker_env(url, port, templates, 50), "PYTHONPATH": path}
            print(f"counting {src} (an empty drain, then {args.n} messages)...", flush=True)
            reset(engine)
            idle = instructions(env, Path(tmp) / f"idle-{i}.out")
            reset(engine)
            fill(engine, args.n, templates, f"count-{i}-{time.time()}", args.body)
            analyze(engine)
            busy = instructions(env, Path(tmp) / f"busy-{i}.out")
            results.append((src, (busy - idle) / args.n, idle))
        engine.dispose()
    print(f"\ninstructions per {args.body} message, whole worker, N={args.n} "
          f"(load average {os.getloadavg()[0]:.1f}: it does not matter here)")
    first = results[0][1]
    for src, per_message, idle in results:
        print(f"  {src:<40}{per_message:>14,.0f}  ({per_message / first - 1:+.1%} vs the first; "
              f"start-up {idle:,})")


if __name__ == "__main__":
    main()
