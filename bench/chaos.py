"""The full chaos run (issue: crash safety). Prints a table; exits 1 on any problem.

10,000 messages, 4 worker processes on a private embedded PostgreSQL, an SMTP server
that answers 10% with 4yz and 2% with 5yz, drops 3% before and 2% after the final
".", times out on 2%, refuses every connection for 20 s, a SIGKILL of a random
worker every 2 s (with a replacement), and one crash-restart of PostgreSQL.

    .venv/bin/python -m bench.chaos [--messages 10000] [--seed 1234]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench.support.chaos import ChaosConfig, run_chaos


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args()
    cfg = replace(ChaosConfig(), messages=args.messages, seed=args.seed)
    with tempfile.TemporaryDirectory() as logs:
        report = run_chaos(cfg, Path(logs), progress=args.progress)
    print(report.table())
    for problem in report.problems[:20]:
        print("PROBLEM:", problem)
    sys.exit(1 if report.problems else 0)


if __name__ == "__main__":
    main()
