"""The embedded default at scale for ``scale.py``: a SQLite file filled with ``--sqlite-events``
rows beside one with ``EMPTY``, both at the head schema; console reads (p95, ``EXPLAIN QUERY
PLAN`` in ``benchmarks/plans/sqlite-*.txt``), ingest through ``webhooks serve`` filled ÷ empty, and
a purge of a tenth of the rows while ingest runs (the longest a delivery waited: wrk's max).

The fill is the PostgreSQL one's shape (``scale_fill.KINDS``: same kinds, shares, payloads, status
mix, spread over ``SPAN``) without forwarding, written with ``executemany`` in transactions of
``CHUNK`` rows: SQLite has no ``generate_series`` by default.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import statistics
import subprocess
import threading
import time
import zlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from common import BIN, base_env, free_port, lua_script, process, signed_events, workdir, wrk
from scale_fill import KINDS, SPAN, Kind, adyen_item, config_file, template, utc_now
from scale_queries import PASSWORD, measure

from webhooks import create_app
from webhooks.store.purge import Plan, purge

EMPTY = 1000
CHUNK = 50_000
CONNECTIONS = 16
GOALS = {"query_p95_ms": 100, "ingest_ratio": 0.9, "stall_ms": 1000}


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S.%f")  # how SQLAlchemy keeps a UTC time in SQLite


def _status(i: int, n: int) -> str:
    if i > n - min(200, n // 5):
        return ("received", "queued", "processing")[i % 3]
    return "failed" if i % 1000 < 5 else "ignored" if i % 1000 < 20 else "processed"


def _ident(kind: Kind, i: int, event_type: str) -> tuple[str, str | None]:
    """The event id and object id ``scale_fill``'s SQL makes for row ``i``."""
    ids = {
        "stripe": (f"evt_1Sc{i:017d}", f"pi_3Sc{i // 3:017d}"),
        "stripe_eu": (f"evt_1Eu{i:017d}", f"ch_3Eu{i // 2:017d}"),
        "adyen": (f"PSP{i // 4:013d}:{event_type}:{i % 4}", f"PSP{i // 4:013d}"),
        "github": (f"d6a0e6f0-{i:012x}", None),
        "shopify": (f"b54557e4-bdd9-4b37-8a5f-{i:012d}", f"{i // 2:8>13d}"),
        "standard": (f"msg_2Kw{i:020d}", None),
    }
    return ids[kind.endpoint]


def fill_sqlite(path: Path, n: int, now: datetime) -> dict[str, Any]:
    """``n`` events with their attempts, objects, duplicates, bodies; tombstones and rejections."""
    subprocess.run(
        [str(BIN / "webhooks"), "db", "upgrade"],
        env={**os.environ, "DATABASE_URL": f"sqlite:///{path}"},
        check=True,
        capture_output=True,
    )
    started = time.monotonic()
    by_share = {s: k for k in KINDS for s in range(*k.shares)}
    templates = {k.endpoint: template(k) for k in KINDS}
    headers = {k.endpoint: json.dumps(k.headers) for k in KINDS}
    body = json.dumps(
        {"live": "false", "notificationItems": [{"NotificationRequestItem": json.loads(adyen_item())}] * 2}
    )
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA synchronous = OFF")
    insert = (
        "INSERT INTO events (endpoint, event_id, kind, event_type, status, attempts, received_at, status_at,"
        " processed_at, object_type, object_id, object_version, payload, item_index, headers, body_digest, scheme,"
        " secret_index, signed_at, last_error, reference) VALUES (" + ",".join("?" * 21) + ")"
    )
    for lo in range(1, n + 1, CHUNK):
        events, attempts, objects, duplicates, bodies = [], [], [], [], []
        for i in range(lo, min(n, lo + CHUNK - 1) + 1):
            kind = by_share[i % 100]
            event_type = kind.types[i % len(kind.types)]
            event_id, object_id = _ident(kind, i, event_type)
            status = _status(i, n)
            at = now - SPAN * (n - i) / n
            stamp, done = _stamp(at), _stamp(at + timedelta(milliseconds=40))
            adyen = kind.kind == "adyen"
            digest = f"{i // 2:064d}" if adyen else None
            events.append((
                kind.endpoint, event_id, kind.kind, event_type, status, 5 if status == "failed" else 1, stamp, done,
                done if status in ("processed", "ignored") else None, kind.object_type, object_id,
                i if object_id else None, templates[kind.endpoint].replace("{{ID}}", event_id).encode(),
                i % 2 if adyen else None, "{}" if adyen else headers[kind.endpoint], digest, kind.kind, 0,
                int(at.timestamp()), "HandlerError: upstream answered 503" if status == "failed" else None,
                f"order-{i // 4}" if adyen else None,
            ))  # fmt: skip
            if status in ("processed", "ignored", "failed"):
                outcome = "error" if status == "failed" else status
                attempts.append((kind.endpoint, event_id, 1, stamp, done, outcome))
            if object_id:
                state = {
                    "id": object_id,
                    "status": "succeeded",
                    "gap": adyen and zlib.crc32(object_id.encode()) % 50 == 0,
                }
                if adyen:
                    state["merchantReference"] = f"order-{i // 4}"
                objects.append((kind.endpoint, kind.object_type, object_id, i, json.dumps(state), event_id, stamp))
            if i % 50 == 7:
                duplicates.append((kind.endpoint, event_id, 1, done))
            if adyen and i % 2 == 0:
                bodies.append(("adyen", digest, body.encode(), "{}", stamp))
        db.execute("BEGIN")
        db.executemany(insert, events)
        db.executemany(
            "INSERT INTO attempts (endpoint, event_id, number, started_at, finished_at, status, handlers)"
            " VALUES (?, ?, ?, ?, ?, ?, '[]')",
            attempts,
        )
        db.executemany("INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?, ?, ?)", objects)
        db.executemany("INSERT INTO duplicates VALUES (?, ?, ?, ?)", duplicates)
        db.executemany("INSERT OR IGNORE INTO bodies VALUES (?, ?, ?, ?, ?)", bodies)
        db.execute("COMMIT")
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO tombstones (endpoint, event_id, replay_key, purged_at) VALUES ('stripe', ?, NULL, ?)",
        [(f"evt_1Purged{i:014d}", _stamp(now - timedelta(days=i % 300))) for i in range(max(1000, n // 20))],
    )
    db.executemany(
        "INSERT INTO rejections (endpoint, kind, reason, detail, http_status, received_at, url, headers, body,"
        " basic_auth_ok) VALUES (?, 'stripe', ?, 'signature did not match', 400, ?, '/webhooks/stripe', '{}', ?, 0)",
        [
            (("stripe", "adyen", "github", "nope")[i % 4], ("bad_signature", "stale_timestamp")[i % 2],
             _stamp(now - timedelta(minutes=i)), b'{"id": "evt_forged"}' * 25)
            for i in range(3000)
        ],
    )  # fmt: skip
    db.execute("COMMIT")
    db.execute("ANALYZE")
    db.close()
    seconds = time.monotonic() - started
    return {"events": n, "seconds": round(seconds, 1), "events_per_second": round(n / seconds),
            "file_bytes": path.stat().st_size, "bytes_per_event": round(path.stat().st_size / n),
            "analyzed": "ANALYZE after the fill"}  # fmt: skip


def _serve(stack: contextlib.ExitStack, work: Path, folder: Path, toml: Path) -> str:
    """``webhooks serve`` on ``folder/webhooks.db`` (as ``ingest.py --serve``); its delivery URL."""
    port = free_port()
    env = base_env(
        work, WEBHOOKS_HANDLERS="bench_handlers", WEBHOOKS_CONFIG=str(toml), WEBHOOKS_ADMIN_PASSWORD=PASSWORD
    )
    for name in ("DATABASE_URL", "REDIS_URL"):
        env.pop(name, None)
    command = [str(BIN / "webhooks"), "serve", "--port", str(port)]
    stack.enter_context(process(command, env, cwd=folder, up=f"http://127.0.0.1:{port}/"))
    return f"http://127.0.0.1:{port}/webhooks/stripe"


def sqlite(args: argparse.Namespace) -> dict[str, Any]:
    from scale import ingest, print_table, verdict

    work = workdir()
    toml = config_file(work, forward=False)
    folders = {label: work / label for label in ("filled", "empty")}
    results: dict[str, Any] = {}
    now = utc_now()
    for label, folder in folders.items():
        folder.mkdir()
        results[f"fill_{label}"] = fill_sqlite(
            folder / "webhooks.db", args.sqlite_events if label == "filled" else EMPTY, now
        )
    f = results["fill_filled"]
    print(f"\nSQLite: filled {f['events']} events in {f['seconds']} s ({f['events_per_second']} events/s), "
          f"{f['bytes_per_event']} bytes/event on disk, then {f['analyzed']}")  # fmt: skip
    apps = {
        label: create_app({"DATABASE_URL": f"sqlite:///{folder / 'webhooks.db'}", "WEBHOOKS_CONFIG": str(toml),
                           "WEBHOOKS_ADMIN_PASSWORD": PASSWORD, "WEBHOOKS_EMBEDDED_WORKER": "false"})
        for label, folder in folders.items()
    }  # fmt: skip
    found = measure(apps, args.runs, now)
    for app in apps.values():
        app.extensions["webhooks"].engine.dispose()
    results["queries"] = [
        {"query": fq["query"], "empty_p95_ms": eq["p95_ms"], "filled_p95_ms": fq["p95_ms"],
         "× empty": round(fq["p95_ms"] / max(eq["p95_ms"], 0.01), 1), "statements": fq["statements"],
         "verdict": verdict(fq["p95_ms"] <= GOALS["query_p95_ms"])}
        for fq, eq in zip(found["filled"], found["empty"], strict=True)
    ]  # fmt: skip
    print_table(f"SQLite console and admin API (p95 of {args.runs} runs; plans in benchmarks/plans/sqlite-*.txt)",
                results["queries"], list(results["queries"][0]))  # fmt: skip
    with contextlib.ExitStack() as stack:
        urls = {label: _serve(stack, work, folder, toml) for label, folder in folders.items()}
        rows = ingest(urls, work, args.seconds, args.rounds, per_second=2000, tag="s")
        results["ingest"] = rows  # fmt: skip
        print_table("SQLite ingest (webhooks serve) at 16 connections, filled ÷ empty", rows, list(rows[0]))
        results["purge"] = _purge(urls["filled"], folders["filled"] / "webhooks.db", toml, work, args)
        print_table("SQLite purge of 10 % while ingest runs (goal: no delivery waits > 1 s)", [results["purge"]],
                    list(results["purge"]))  # fmt: skip
    return results


def _purge(url: str, path: Path, toml: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    quiet = wrk(
        url, lua_script(work / "squiet.lua", signed_events(args.seconds * 2000, "sq")), args.seconds, CONNECTIONS
    )
    app = create_app({"DATABASE_URL": f"sqlite:///{path}", "WEBHOOKS_CONFIG": str(toml),
                      "WEBHOOKS_EMBEDDED_WORKER": "false"})  # fmt: skip
    rt = app.extensions["webhooks"]
    window = SPAN * 0.9
    done: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        done["deleted"] = purge(rt.sessions, Plan(window, window), kinds={k.kind for k in KINDS}, force=True)
        done["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    busy = []
    while thread.is_alive() or not busy:
        script = lua_script(work / f"sbusy{len(busy)}.lua", signed_events(args.seconds * 2000, f"sp{len(busy)}"))
        busy.append(wrk(url, script, args.seconds, CONNECTIONS))
    thread.join()
    stall = max(r["max_ms"] for r in busy)
    return {
        "deleted": done["deleted"],
        "purge_seconds": round(done["seconds"], 1),
        "rows_per_second": round(done["deleted"] / done["seconds"]),
        "ingest_quiet_rps": round(quiet["rps"]),
        "ingest_purging_rps": round(statistics.mean(r["rps"] for r in busy)),
        "ratio": round(statistics.mean(r["rps"] for r in busy) / quiet["rps"], 2),
        "max_wait_ms_quiet": quiet["max_ms"],
        "max_wait_ms_purging": stall,
        "non2xx": sum(r["non2xx"] + r["socket_errors"] for r in busy),
        "verdict": "PASS" if stall <= GOALS["stall_ms"] else "MISS",
    }
