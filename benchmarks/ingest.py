"""Ingest: the receiver against bare gunicorn + Flask, measured in the same run.

    .venv/bin/python benchmarks/ingest.py [--seconds 8] [--connections 16 64] [--json out.json]
    .venv/bin/python benchmarks/ingest.py --serve      # `webhooks serve` (SQLite, embedded queue)

Cases, each at every connection count: the baseline (a Flask view answering 200 under the same
gunicorn config), first deliveries (verify, insert + commit, enqueue), duplicates (verify, an
insert that finds the row), and a mixed storm (1 new : 2 duplicates). Production runs on a fresh
PostgreSQL database and Redis (TEST_DATABASE_URL, TEST_REDIS_URL); ``--serve`` runs the embedded
default on SQLite instead. Prints a table of requests/s and p50/p99 with their ratios to the
baseline; ``--json`` writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from common import (  # the script's folder is on sys.path
    BIN,
    REDIS,
    base_env,
    ensure_tools,
    free_port,
    gunicorn,
    lua_script,
    prime,
    process,
    scalar,
    scratch_database,
    signed_events,
    table,
    workdir,
    wrk,
)

NEW_PER_SECOND = 6000  # more than the receiver takes: a run never wraps round to a stored event


def run_cases(url: str, work: Path, seconds: int, connections: list[int], label: str) -> list[dict[str, Any]]:
    """New, duplicate and mixed runs against a receiver at ``url``."""
    rows = []
    stored = signed_events(2000, "dup")
    prime(url, stored)
    for c in connections:
        new = lua_script(work / f"new{c}.lua", signed_events(seconds * NEW_PER_SECOND, f"n{c}"))
        dup = lua_script(work / f"dup{c}.lua", stored)
        mixed = lua_script(work / f"mixed{c}.lua", signed_events(seconds * NEW_PER_SECOND // 3, f"m{c}"), stored, 3)
        for case, script in ((f"{label}: first deliveries", new), (f"{label}: duplicates", dup),
                             (f"{label}: mixed 1 new : 2 dup", mixed)):
            rows.append({"case": case, **wrk(url, script, seconds, c)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--connections", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--serve", action="store_true", help="measure `webhooks serve` instead of gunicorn")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    ensure_tools()
    work = workdir()
    with scratch_database() as db:
        # The baseline runs under the same gunicorn config, whose start-up waits for a migrated database.
        env = base_env(work, DATABASE_URL=db, REDIS_URL=REDIS)
        baseline: dict[int, dict[str, Any]] = {}
        port = free_port()
        with gunicorn("baseline_app:app", env, port, work):
            script = lua_script(work / "base.lua", signed_events(1000, "b"))
            for c in args.connections:
                baseline[c] = {"case": "baseline: bare gunicorn + Flask",
                               **wrk(f"http://127.0.0.1:{port}/webhooks/stripe", script, args.seconds, c)}
        port = free_port()
        url = f"http://127.0.0.1:{port}/webhooks/stripe"
        stored = None
        if args.serve:
            serve_env = base_env(work, WEBHOOKS_HANDLERS="bench_handlers")
            for name in ("DATABASE_URL", "REDIS_URL"):
                serve_env.pop(name, None)
            with process([str(BIN / "webhooks"), "serve", "--port", str(port)], serve_env, cwd=work,
                         up=f"http://127.0.0.1:{port}/"):
                rows = run_cases(url, work, args.seconds, args.connections, "webhooks serve")
        else:
            with gunicorn("webhooks:create_app()", env, port):
                rows = run_cases(url, work, args.seconds, args.connections, "receiver")
            stored = scalar(db, "SELECT count(*) FROM events")
    print(table([*baseline.values(), *rows], baseline))
    print(f"gunicorn {env['WEB_CONCURRENCY']} processes × {env['WEB_THREADS']} threads (WEB_CONCURRENCY, "
          f"WEB_THREADS) for baseline and receiver; {os.cpu_count()} cores shared by everything")
    if stored is not None:
        print(f"rows stored: {stored}")
    if args.json:
        args.json.write_text(json.dumps({"baseline": list(baseline.values()), "cases": rows, "rows": stored}, indent=1))


if __name__ == "__main__":
    main()
