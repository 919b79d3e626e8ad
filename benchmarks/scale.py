"""Scale: a filled database measured beside an empty one, in the same run (issue #22, "Measure").

    .venv/bin/python benchmarks/scale.py [--events 10000000] [--sqlite-events 1000000] [--quick]
                                         [--only pg|sqlite] [--json out.json]

PostgreSQL: a fresh database filled with ``--events`` realistic rows (``scale_fill``), another
with ``EMPTY`` rows (so every detail and search route has a row to find), both at the head schema
(``webhooks db upgrade``). Sections: the fill's speed; storage per event by kind; every console and
admin-API read (p95 of ``--runs``, plans in ``benchmarks/plans/``); the sweeper's and ``/metrics``'
database cost per run; ingest (first deliveries, duplicates) at 16 connections, filled ÷ empty; a
purge of ``min(1 M, events / 10)`` expired rows while ingest runs (ingest ÷ ingest without the
purge, the longest blocked insert, sizes before and after). SQLite (``scale_sqlite``): the same
for the embedded default at ``--sqlite-events``. One table a section, PASS/MISS per goal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from common import (  # the script's folder is on sys.path
    REDIS,
    base_env,
    ensure_tools,
    free_port,
    gunicorn,
    lua_script,
    prime,
    scratch_database,
    signed_events,
    workdir,
    wrk,
)
from scale_costs import Prober, background, sizes, storage
from scale_fill import KINDS, SPAN, config_file, fill_pg, utc_now
from scale_queries import PASSWORD, PLANS, captured, measure, plans

from webhooks import create_app
from webhooks.store.purge import Plan, purge

EMPTY = 1000
CONNECTIONS = 16
GOALS = {"query_p95_ms": 100, "ingest_ratio": 0.9, "purge_ingest_ratio": 0.8, "blocked_ms": 100}


def app_config(db: str, toml: Path) -> dict[str, Any]:
    return {
        "DATABASE_URL": db,
        "REDIS_URL": REDIS,
        "WEBHOOKS_CONFIG": str(toml),
        "WEBHOOKS_ADMIN_PASSWORD": PASSWORD,
        "WEBHOOKS_EMBEDDED_WORKER": "false",
    }


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def median_ratio(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> tuple[float, list[float]]:
    ratios = sorted(round(f["rps"] / e["rps"], 2) for e, f in pairs)
    return statistics.median(ratios), ratios


def ingest(
    urls: dict[str, str], work: Path, seconds: int, rounds: int, per_second: int = 4000, tag: str = ""
) -> list[dict[str, Any]]:
    """First deliveries and duplicates at 16 connections on each database (``urls``: ``empty``
    and ``filled``), alternating; each round's ratio filled ÷ empty, the median reported.
    ``per_second``: new events written a second of wrk (more than the server takes)."""
    stored = signed_events(2000, f"{tag}dup")
    for url in urls.values():
        prime(url, stored)
    dup = lua_script(work / f"{tag}dup.lua", stored)
    rows = []
    for case in ("first deliveries", "duplicates"):
        pairs = []
        for r in range(rounds):
            run = {}
            for label, url in urls.items():
                script = (
                    dup
                    if case == "duplicates"
                    else lua_script(
                        work / f"{tag}new_{label}_{r}.lua", signed_events(seconds * per_second, f"{tag}{label[0]}{r}")
                    )
                )
                run[label] = wrk(url, script, seconds, CONNECTIONS)
            pairs.append((run["empty"], run["filled"]))
        ratio, spread = median_ratio(pairs)
        empty, filled = pairs[len(pairs) // 2]
        rows.append(
            {
                "case": case,
                "empty_rps": round(empty["rps"]),
                "filled_rps": round(filled["rps"]),
                "ratio": ratio,
                "ratios": spread,
                "filled_p99_ms": filled["p99_ms"],
                "empty_p99_ms": empty["p99_ms"],
                "verdict": verdict(ratio >= GOALS["ingest_ratio"]),
            }
        )
    return rows


def purge_under_ingest(db: str, toml: Path, url: str, work: Path, events: int, seconds: int) -> dict[str, Any]:
    """Ingest with the prober, then a purge of ≈ ``min(1 M, events / 10)`` rows with the same
    ingest and prober running until it ends (wrk in rounds of ``seconds``)."""
    target = min(1_000_000, events // 10)
    window = SPAN * (1 - target / events)
    app = create_app(app_config(db, toml))
    rt = app.extensions["webhooks"]
    before = sizes(db)
    prober = Prober(db)
    prober.start()
    quiet = wrk(url, lua_script(work / "quiet.lua", signed_events(seconds * 4000, "q")), seconds, CONNECTIONS)
    quiet_probe = prober.stop()
    done: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        plan = Plan(older_than=window, failed_older_than=window)
        with captured(rt.engine) as statements:
            done["deleted"] = purge(rt.sessions, plan, kinds={k.kind for k in KINDS}, force=True)
        done["seconds"] = time.monotonic() - started
        done["statements"] = statements

    thread = threading.Thread(target=run, daemon=True)
    prober = Prober(db)
    prober.start()
    thread.start()
    busy = []
    while thread.is_alive() or not busy:
        busy.append(
            wrk(
                url,
                lua_script(work / f"busy{len(busy)}.lua", signed_events(seconds * 4000, f"p{len(busy)}")),
                seconds,
                CONNECTIONS,
            )
        )
    thread.join()
    busy_probe = prober.stop()
    after = sizes(db)
    # Its reads again, now that nothing is left to delete: what finding the next batch costs.
    distinct = list({statement: (statement, params) for statement, params in done["statements"]}.values())
    plans(rt.engine, distinct, PLANS / "pg-purge.txt")
    rps = statistics.mean(r["rps"] for r in busy)
    ratio = round(rps / quiet["rps"], 2)
    return {
        "target_rows": target,
        "window_days": round(window / timedelta(days=1), 1),
        "deleted": done["deleted"],
        "purge_seconds": round(done["seconds"], 1),
        "rows_per_second": round(done["deleted"] / done["seconds"]),
        "ingest_quiet_rps": round(quiet["rps"]),
        "ingest_purging_rps": round(rps),
        "ratio": ratio,
        "wrk_rounds": len(busy),
        "wrk_max_ms_quiet": quiet["max_ms"],
        "wrk_max_ms_purging": max(r["max_ms"] for r in busy),
        "probes": busy_probe["probes"],
        "probe_max_ms_quiet": quiet_probe["max_ms"],
        "probe_p99_ms_purging": busy_probe["p99_ms"],
        "probe_max_ms_purging": busy_probe["max_ms"],
        "lock_waits_purging": busy_probe["lock_waits"],
        "lock_wait_max_ms_purging": busy_probe["lock_wait_max_ms"],
        "ratio_verdict": verdict(ratio >= GOALS["purge_ingest_ratio"]),
        # The goal is about locks: a statement seen waiting on one (any statement, the inserts
        # included) for longer than the bound; the prober's slowest insert (I/O too) is beside it.
        "blocked_verdict": verdict(busy_probe["lock_wait_max_ms"] <= GOALS["blocked_ms"]),
        "before": before,
        "after": after,
    }


def print_table(title: str, rows: list[dict[str, Any]], columns: list[str]) -> None:
    print(f"\n## {title}")
    widths = [max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(w) for c, w in zip(columns, widths, strict=True)))


def compare(filled: list[dict[str, Any]], empty: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Rows of the same ``key`` side by side: p95 and blocks, filled ÷ empty."""
    out = []
    for f, e in zip(filled, empty, strict=True):
        out.append(
            {
                key: f[key],
                "empty_p95_ms": e["p95_ms"],
                "filled_p95_ms": f["p95_ms"],
                "× empty": round(f["p95_ms"] / max(e["p95_ms"], 0.01), 1),
                "empty_blocks": e["blocks"],
                "filled_blocks": f["blocks"],
                "statements": f["statements"],
            }
        )
    return out


def postgres(args: argparse.Namespace) -> dict[str, Any]:
    work = workdir()
    toml = config_file(work)
    results: dict[str, Any] = {}
    with scratch_database() as filled, scratch_database() as empty, contextlib.ExitStack() as servers:
        now = utc_now()
        results["fill"] = fill_pg(filled, args.events, now)
        fill_pg(empty, EMPTY, now)
        f = results["fill"]
        print(
            f"filled {f['events']} events in {f['seconds']} s ({f['events_per_second']} events/s; inserts "
            f"{f['insert_seconds']} s, indexes {f['index_seconds']} s), then {f['analyzed']}: {f['rows']}"
        )
        results["storage"] = storage(filled)
        print_table("Storage per event (bytes)", results["storage"], list(results["storage"][0]))
        apps = {label: create_app(app_config(db, toml)) for label, db in (("filled", filled), ("empty", empty))}
        found = measure(apps, args.runs, now)
        results["queries"] = compare(found["filled"], found["empty"], "query")
        for row in results["queries"]:
            row["verdict"] = verdict(row["filled_p95_ms"] <= GOALS["query_p95_ms"])
        print_table(
            f"Console and admin API (p95 of {args.runs} runs; plans in benchmarks/plans/pg-*.txt)",
            results["queries"],
            list(results["queries"][0]),
        )
        costs = {
            label: background(app.extensions["webhooks"], args.runs, label == "filled") for label, app in apps.items()
        }
        results["background"] = compare(costs["filled"], costs["empty"], "cost")
        for row in results["background"]:
            row["verdict"] = verdict(row["filled_blocks"] <= 1.5 * row["empty_blocks"] + 20)
        print_table(
            "Sweeper and /metrics per run (goal: blocks independent of size)",
            results["background"],
            list(results["background"][0]),
        )
        env = base_env(work, REDIS_URL=REDIS, WEBHOOKS_CONFIG=str(toml))
        urls = {}
        for label, db in (("filled", filled), ("empty", empty)):
            port = free_port()
            servers.enter_context(gunicorn("webhooks:create_app()", {**env, "DATABASE_URL": db}, port))
            urls[label] = f"http://127.0.0.1:{port}/webhooks/stripe"
        results["ingest"] = ingest(urls, work, args.seconds, args.rounds)
        print_table(
            "Ingest at 16 connections, filled ÷ empty (goal ≥ 0.9)", results["ingest"], list(results["ingest"][0])
        )
        results["purge"] = p = purge_under_ingest(filled, toml, urls["filled"], work, args.events, args.seconds)
        shown = {k: v for k, v in p.items() if k not in ("before", "after")}
        print_table(
            "Purge while ingest runs (goals: ingest ≥ 0.8 × without, no lock held against a statement > 100 ms)",
            [shown],
            list(shown),
        )
        sized = [
            {
                "table": t,
                **{f"before_{k}": v for k, v in p["before"]["tables"][t].items()},
                **{f"after_{k}": v for k, v in p["after"]["tables"][t].items()},
            }
            for t in ("events", "attempts", "bodies", "tombstones")
        ]
        print_table("Sizes before and after the purge (bytes; no VACUUM FULL)", sized, list(sized[0]))
        print(f"rows before → after: {p['before']['rows']} → {p['after']['rows']}; dead tuples in events after: "
              f"{p['after']['events_dead_tuples']}")  # fmt: skip
    return results


def main() -> None:
    logging.getLogger("webhooks").setLevel(logging.ERROR)  # the sweeper's per-row warnings
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--sqlite-events", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="200 000 / 100 000 events, short runs")
    parser.add_argument("--only", choices=("pg", "sqlite"))
    parser.add_argument("--runs", type=int, default=30, help="runs per query (p95)")
    parser.add_argument("--seconds", type=int, default=5, help="length of one wrk run")
    parser.add_argument("--rounds", type=int, default=3, help="filled/empty ingest pairs (median ratio)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.events, args.sqlite_events, args.seconds = min(args.events, 200_000), min(args.sqlite_events, 100_000), 3
    ensure_tools()
    results: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    if args.only in (None, "pg"):
        results["postgresql"] = postgres(args)
    if args.only in (None, "sqlite"):
        from scale_sqlite import sqlite

        results["sqlite"] = sqlite(args)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
