"""Ingest: the receiver against bare gunicorn + Flask, measured in the same run.

    .venv/bin/python benchmarks/ingest.py [--seconds 4] [--rounds 3] [--connections 16 64] [--json out.json]
    .venv/bin/python benchmarks/ingest.py --serve      # `webhooks serve` (SQLite, embedded queue)
    .venv/bin/python benchmarks/ingest.py --mounted    # the receiver mounted in a user's Flask app (#41)

Cases, each at every connection count: the baseline (a Flask view answering 200 under the same
gunicorn config), first deliveries (verify, insert + commit, enqueue), duplicates (verify, an
insert that finds the row), and a mixed storm (1 new : 2 duplicates). Production runs on a fresh
PostgreSQL database and Redis (TEST_DATABASE_URL, BENCH_REDIS_URL); ``--serve`` runs the embedded
default on SQLite instead. Prints a table of requests/s and p50/p99 with their ratios to the
baseline; ``--json`` writes the numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
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

MOUNTED_APP = """
from flask import Flask, request

from webhooks.service.embedding import Webhooks

app = Flask("shop")


@app.before_request
def parse_every_body() -> None:
    request.form  # a user's hook that reads every body: a delivery under the mount never reaches it


@app.get("/")
def home() -> str:
    return "shop"


Webhooks(app, url_prefix="/hooks")
"""
NEW_PER_SECOND = 6000  # more than the receiver takes: a run never wraps round to a stored event


def interleaved(
    base_url: str, base_script: Path, url: str, scripts: list[Path], case: str, seconds: int, connections: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One round per script (a baseline run, then a run of the case with that script): each ratio is taken against the
    baseline measured just before it, and the median round is reported, so load that comes and
    goes on a shared machine moves both sides of a ratio alike."""
    pairs = []
    for script in scripts:
        base = wrk(base_url, base_script, seconds, connections)
        pairs.append((base, wrk(url, script, seconds, connections)))
    pairs.sort(key=lambda pair: pair[1]["rps"] / pair[0]["rps"])
    base, run = pairs[len(pairs) // 2]
    spread = [round(r["rps"] / b["rps"], 2) for b, r in pairs]
    return {"case": "baseline: bare gunicorn + Flask", **base}, {"case": case, **run, "ratios": spread}


def processed(work: Path) -> tuple[int, int]:
    """``webhooks serve``'s SQLite file (in ``work``): (events processed, events stored)."""
    with contextlib.closing(sqlite3.connect(work / "webhooks.db", timeout=30)) as conn:
        done, total = conn.execute("SELECT sum(status = 'processed'), count(*) FROM events").fetchone()
    return int(done or 0), int(total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=4, help="length of one wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="baseline/case pairs per case (median reported)")
    parser.add_argument("--connections", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--serve", action="store_true", help="measure `webhooks serve` instead of gunicorn")
    parser.add_argument("--mounted", action="store_true", help="the receiver mounted in a Flask app of its own")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    ensure_tools()
    work = workdir()
    stored = None
    during = None
    with scratch_database() as db, contextlib.ExitStack() as servers:
        # The baseline runs under the same gunicorn config, whose start-up waits for a migrated database.
        env = base_env(work, DATABASE_URL=db, REDIS_URL=REDIS)
        base_port, port = free_port(), free_port()
        servers.enter_context(gunicorn("baseline_app:app", env, base_port, work))
        base_url = f"http://127.0.0.1:{base_port}/webhooks/stripe"
        url = f"http://127.0.0.1:{port}/webhooks/stripe"
        if args.serve:
            label = "webhooks serve"
            serve_env = base_env(work, WEBHOOKS_HANDLERS="bench_handlers")
            for name in ("DATABASE_URL", "REDIS_URL"):
                serve_env.pop(name, None)
            servers.enter_context(
                process(
                    [str(BIN / "webhooks"), "serve", "--port", str(port)],
                    serve_env,
                    cwd=work,
                    up=f"http://127.0.0.1:{port}/",
                )
            )
        elif args.mounted:  # Webhooks(app, url_prefix="/hooks") in a user's app, under the same gunicorn config
            label = "mounted"
            (work / "mounted_app.py").write_text(MOUNTED_APP)
            servers.enter_context(gunicorn("mounted_app:app", env, port, work))
            url = f"http://127.0.0.1:{port}/hooks/webhooks/stripe"
        else:
            label = "receiver"
            servers.enter_context(gunicorn("webhooks:create_app()", env, port))
        base_script = lua_script(work / "base.lua", signed_events(1000, "b"))
        stored_events = signed_events(2000, "dup")
        prime(url, stored_events)
        processed_before = processed(work) if args.serve else None
        per_round = args.seconds * NEW_PER_SECOND
        rows: list[dict[str, Any]] = []
        for c in args.connections:
            rounds = range(args.rounds)  # new events for every run: none wraps round to a stored one
            scripts = {
                "first deliveries": [
                    lua_script(work / f"new{c}_{r}.lua", signed_events(per_round, f"n{c}")) for r in rounds
                ],
                "duplicates": [lua_script(work / f"dup{c}.lua", stored_events)] * args.rounds,
                "mixed 1 new : 2 dup": [
                    lua_script(work / f"mixed{c}_{r}.lua", signed_events(per_round // 3, f"m{c}"), stored_events, 3)
                    for r in rounds
                ],
            }
            for case, case_scripts in scripts.items():
                base, run = interleaved(base_url, base_script, url, case_scripts, f"{label}: {case}", args.seconds, c)
                rows += [base, run]
        if not args.serve:
            stored = scalar(db, "SELECT count(*) FROM events")
        else:  # while it still runs: what its worker processed during the measured runs
            done = processed(work)
            assert processed_before is not None
            stored = done[1]
            during = done[0] - processed_before[0]
    print(table(rows))
    print(
        f"gunicorn {env['WEB_CONCURRENCY']} processes × {env['WEB_THREADS']} threads (WEB_CONCURRENCY, "
        f"WEB_THREADS) for baseline and receiver; {os.cpu_count()} cores shared by everything; "
        f"each ratio is the median of {args.rounds} rounds (baseline run, then the case's), spread in brackets"
    )
    if stored is not None:
        print(f"rows stored: {stored}")
    if args.serve:
        print(f"processed by the embedded worker during the measured runs: {during} (of {stored} stored)")
        assert during > 0, "the embedded worker processed nothing while ingest ran"
    if args.json:
        args.json.write_text(json.dumps({"cases": rows, "rows": stored, "processed_during": during}, indent=1))


if __name__ == "__main__":
    main()
