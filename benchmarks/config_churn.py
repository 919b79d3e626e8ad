"""Runtime configuration at scale (#32): start-up, ingest and propagation with thousands of endpoints in the database.

    .venv/bin/python benchmarks/config_churn.py [--endpoints 10000] [--destinations 1000] [--seconds 60]
                                                [--connections 16] [--json f]

The Procfile's processes on PostgreSQL + Redis (TEST_DATABASE_URL, BENCH_REDIS_URL, flushed):
gunicorn (``WEB_CONCURRENCY`` 2 × ``WEB_THREADS`` 4) and one ``webhooks worker``, with a fixed
``WEBHOOKS_ENCRYPTION_KEYS``, an admin password and the file's endpoint ``stripe``
(``STRIPE_WEBHOOK_SECRET``), which wrk posts to. Two fresh databases in one run:

- **empty**: the file's endpoint only. In-process ``webhooks.create_app`` time, gunicorn's start-up
  (process started → first ``/healthz`` answer), then ingest **(a)**: wrk, ``--seconds``/3, first
  deliveries of fresh signed Stripe events at ``--connections``.
- **filled**: ``--endpoints`` endpoints (kind stripe, one ``whsec_`` secret each, label
  ``tenant-<i % 100>``, each forwarding to one of the destinations) and ``--destinations``
  destinations (``https://svc<i>.example.com/hooks``, one signing secret each; the hosts need not
  resolve: validation makes no DNS lookup) written in-process with ``config_items.create`` inside
  one ``config_items.batch`` (one transaction, timed). Then the same start-up figures (and
  ``create_app`` in a fresh interpreter, its imports included, as a web process pays it), ingest
  **(b)** with no change, and ingest **(c)** while changes go through the admin API, in turn:
  PATCH an endpoint's label; POST a new endpoint ``churn-<i>``; add a secret to it; expire that
  secret. The changes are made one at a time, at most one a second (the next one on the next whole
  second, or at once when the previous answer came later), ``--seconds``/3 of them; (c) is wrk runs
  of ``--seconds``/3 back to back until they are all answered (at most four runs): its requests/s
  over all runs, its p99 the highest run's. The changes made, their rate and their API answer
  times are reported.

Propagation, during (c): each change's version is read from the database right after its API
answer, and this process LISTENs on the configuration channel as every process does, so it also
knows when each commit was announced. One poller thread per web process holds a keep-alive
connection that process accepted (its socket found among the process's descriptors; re-pinned when
dropped) and reads ``/healthz`` every ≈ 20 ms, during (a), (b) and (c) alike. A change's
propagation to a process is the time of the first poll answer from it reporting ``config_version``
≥ the change's version, minus the time of the API answer (the issue's measure; 0 when the process
was current before the answer came back: the process that served the call reloads before
answering), and minus the time of the commit's notice (what a process's own watcher waits for). The
worker process has no HTTP, so it is not measured here; its watcher is the same code
(``webhooks.runtime.watch``). Goals (#32): start-up < 2 s filled, ingest filled ≥ 0.9 × empty,
propagation p99 ≤ 1 s.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from common import (  # the script's folder is on sys.path
    BIN,
    REDIS,
    accepted_by,
    base_env,
    ensure_tools,
    free_port,
    lua_script,
    process,
    scalar,
    scratch_database,
    signed_events,
    workdir,
    wrk,
)
from sqlalchemy.orm import Session

KEYS = "k1:" + base64.b64encode(b"config-churn-benchmark-key-32byt").decode()  # fixed test key, 32 bytes
ADMIN_PASSWORD = "churn-bench-admin-password"
NEW_PER_SECOND = 3000  # fresh events per second of a wrk run: more than the receiver takes here
POLL = 0.02  # seconds between a poller's /healthz reads
LABELS = 100
CHANGE_KINDS = ("patch label", "create endpoint", "add secret", "expire secret")
SQL_VERSION = "SELECT version FROM config_version WHERE id = 1"


def whsec(tag: str) -> str:
    """A valid ``whsec_`` secret (base64 of 32 bytes), distinct per ``tag``."""
    return "whsec_" + base64.b64encode(tag.encode().ljust(32, b".")[:32]).decode()


def environment(work: Path, db: str) -> dict[str, str]:
    return base_env(
        work,
        DATABASE_URL=db,
        REDIS_URL=REDIS,
        WEBHOOKS_ENCRYPTION_KEYS=KEYS,
        WEBHOOKS_ADMIN_PASSWORD=ADMIN_PASSWORD,
        WEBHOOKS_HANDLERS="bench_handlers",  # the worker's no-op handler
    )


# ----- fill ------------------------------------------------------------------------------------
def fill(db: str, endpoints: int, destinations: int) -> float:
    """Write the items in one transaction (``config_items.batch``); the seconds it took."""
    from webhooks.configuration.keys import Keyring
    from webhooks.store.configuration import items as store

    keyring = Keyring.parse(KEYS)
    engine = sa.create_engine(db)
    now = datetime.now(UTC)
    started = time.perf_counter()
    try:
        with Session(engine) as session, store.batch(session):
            for i in range(destinations):
                table = {"url": f"https://svc{i}.example.com/hooks", "secrets": [whsec(f"dest-{i}")]}
                store.create(session, keyring, "destination", f"svc-{i}", table, label=None, who="bench", now=now)
            for i in range(endpoints):
                table = {"provider": "stripe", "secrets": [whsec(f"ep-{i}")], "forward": [f"svc-{i % destinations}"]}
                label = f"tenant-{i % LABELS}"
                store.create(session, keyring, "endpoint", f"ep-{i}", table, label=label, who="bench", now=now)
    finally:
        engine.dispose()
    return time.perf_counter() - started


# ----- start-up --------------------------------------------------------------------------------
def create_app_seconds(env: dict[str, str]) -> tuple[float, int, int]:
    """In-process ``webhooks.create_app``: (seconds, endpoints, destinations it holds); its watcher stopped after."""
    import webhooks

    started = time.perf_counter()
    app = webhooks.create_app(env)
    took = time.perf_counter() - started
    rt = app.extensions["webhooks"]
    found = len(rt.settings.endpoints), len(rt.settings.destinations)
    if rt.watcher is not None:
        rt.watcher.stop.set()
    rt.engine.dispose()
    return took, *found


def one_change_seconds(env: dict[str, str], name: str) -> dict[str, float]:
    """In-process, before the servers start (no load): one PATCH of ``name``'s label through the
    admin API (test client: validation, the store's transaction, this process's reload, the
    answer), then one change written by the store and ``reload_config`` alone (what every other
    process does on the notice). Seconds of each."""
    import webhooks
    from webhooks.configuration.keys import Keyring
    from webhooks.store.configuration import items as store

    app = webhooks.create_app(env)
    rt = app.extensions["webhooks"]
    if rt.watcher is not None:
        rt.watcher.stop.set()
    auth = "Basic " + base64.b64encode(f"admin:{ADMIN_PASSWORD}".encode()).decode()
    try:
        started = time.perf_counter()
        answer = app.test_client().patch(
            f"/admin/api/endpoints/{name}", json={"label": "moved"}, headers={"Authorization": auth}
        )
        api = time.perf_counter() - started
        assert answer.status_code == 200, answer.get_data(as_text=True)[:200]
        with rt.sessions() as session:
            value = whsec("reload")
            store.add_secret(session, Keyring.parse(KEYS), name, value, who="bench", now=datetime.now(UTC))
        started = time.perf_counter()
        rt.reload_config()
        return {"api_patch_s": api, "reload_s": time.perf_counter() - started}
    finally:
        rt.engine.dispose()


COLD = """
import json, time
started = time.perf_counter()
import webhooks
imported = time.perf_counter()
webhooks.create_app()
print(json.dumps([imported - started, time.perf_counter() - imported]))
"""


def cold_create_app(env: dict[str, str]) -> tuple[float, float]:
    """A fresh interpreter, as a web process starts: (seconds importing ``webhooks``, seconds in ``create_app``)."""
    done = subprocess.run([sys.executable, "-c", COLD], env=env, capture_output=True, text=True, check=True)
    imported, created = json.loads(done.stdout.strip().splitlines()[-1])
    return float(imported), float(created)


def gunicorn_cmd(port: int) -> list[str]:
    """common.gunicorn's command (the Procfile's config), started here without its wait for ``/``."""
    return [
        str(BIN / "gunicorn"),
        "webhooks:create_app()",
        "-c",
        "python:webhooks.gunicorn_conf",
        "--bind",
        f"127.0.0.1:{port}",
        "--no-control-socket",
    ]


def first_healthz(port: int, started: float, timeout: float = 120) -> float:
    """Seconds from ``started`` to the first ``/healthz`` answer, polled every ``POLL`` s."""
    while time.perf_counter() - started < timeout:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
                answer.read()
                return time.perf_counter() - started
        except (OSError, http.client.HTTPException):
            time.sleep(POLL)
    raise RuntimeError(f"gunicorn did not answer /healthz within {timeout} s")


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            found += [int(p) for p in (task / "children").read_text().split()]
    return found


@contextlib.contextmanager
def deployment(work: Path, db: str, tag: str) -> Iterator[dict[str, Any]]:
    """gunicorn and one ``webhooks worker``; yields the port, the web processes' ids and the start-up time."""
    env, port = environment(work, db), free_port()
    with contextlib.ExitStack() as stack:
        started = time.perf_counter()
        master = stack.enter_context(process(gunicorn_cmd(port), env, log=work / f"web-{tag}.log"))
        startup = first_healthz(port, started)
        stack.enter_context(process([str(BIN / "webhooks"), "worker"], env, log=work / f"worker-{tag}.log"))
        deadline = time.monotonic() + 60
        while len(pids := children(master.pid)) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("gunicorn did not start two web processes")
            time.sleep(0.1)
        yield {"port": port, "pids": pids, "startup_s": startup, "env": env}


# ----- pollers: a keep-alive connection pinned to each web process -----------------------------
class Poller(threading.Thread):
    """Reads ``/healthz`` of one web process every ``POLL`` s; keeps when each version was first seen."""

    def __init__(self, port: int, pid: int, pids: list[int], stop: threading.Event) -> None:
        super().__init__(name=f"poller-{pid}", daemon=True)
        self.port, self.pid, self.pids, self.stop = port, pid, pids, stop
        self.seen: list[tuple[float, int]] = []  # (monotonic time of the answer, a version higher than before)
        self.round_trips: list[float] = []
        self.pins = 0
        self.failures = 0
        self.conn: http.client.HTTPConnection | None = None

    def _pin(self) -> http.client.HTTPConnection:
        for _ in range(500):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            try:
                conn.request("GET", "/healthz")
                conn.getresponse().read()
                if accepted_by(self.port, conn, self.pids) == self.pid:
                    self.pins += 1
                    return conn
            except (OSError, http.client.HTTPException):
                pass
            conn.close()
        raise RuntimeError(f"no connection reached web process {self.pid}")

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                if self.conn is None:
                    self.conn = self._pin()
                sent = time.monotonic()
                self.conn.request("GET", "/healthz")
                body = self.conn.getresponse().read()
                answered = time.monotonic()
                version = int(json.loads(body)["config_version"])
                self.round_trips.append(answered - sent)
                if not self.seen or version > self.seen[-1][1]:
                    self.seen.append((answered, version))
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                self.failures += 1
                if self.conn is not None:
                    self.conn.close()
                self.conn = None
                continue
            self.stop.wait(max(0.0, POLL - (time.monotonic() - sent)))
        if self.conn is not None:
            self.conn.close()

    def first_at(self, version: int) -> float | None:
        return next((t for t, v in self.seen if v >= version), None)


@contextlib.contextmanager
def pollers(dep: dict[str, Any]) -> Iterator[list[Poller]]:
    stop = threading.Event()
    found = [Poller(dep["port"], pid, dep["pids"], stop) for pid in dep["pids"]]
    for poller in found:
        poller.start()
    try:
        deadline = time.monotonic() + 60
        while not all(p.seen for p in found):
            if time.monotonic() > deadline:
                raise RuntimeError("a poller never reached its web process")
            time.sleep(0.05)
        yield found
    finally:
        stop.set()
        for poller in found:
            poller.join(15)


# ----- the changes -----------------------------------------------------------------------------
class Churn(threading.Thread):
    """Changes through the admin API, one after another and at most one a second (the next starts
    on the next whole second after the start, or at once when the previous answer came later),
    until ``count`` are made or ``stop``; each change's version read from the database right after
    its answer."""

    def __init__(self, port: int, db: str, count: int, endpoints: int, destinations: int) -> None:
        super().__init__(name="churn", daemon=True)
        self.base = f"http://127.0.0.1:{port}/admin/api"
        self.db, self.count, self.endpoints, self.destinations = db, count, endpoints, destinations
        self.auth = "Basic " + base64.b64encode(f"admin:{ADMIN_PASSWORD}".encode()).decode()
        self.changes: list[dict[str, Any]] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def call(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            self.base + path,
            data=json.dumps(body).encode(),
            method=method,
            headers={"Authorization": self.auth, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as refused:
            return refused.code, {"error": refused.read().decode(errors="replace")[:200]}

    def change(self, i: int, state: dict[str, Any]) -> tuple[str, int, dict[str, Any]]:
        kind = CHANGE_KINDS[i % 4]
        if kind == "patch label":
            state["target"] = f"ep-{(i * 37) % self.endpoints}"
            return kind, *self.call("PATCH", f"/endpoints/{state['target']}", {"label": f"tenant-moved-{i}"})
        if kind == "create endpoint" or "endpoint" not in state:
            state["endpoint"] = state["target"] = f"churn-{i}"
            body = {
                "name": state["endpoint"],
                "provider": "stripe",
                "secrets": [whsec(f"churn-{i}")],
                "label": "churn",
                "forward": [f"svc-{i % self.destinations}"],
            }
            return "create endpoint", *self.call("POST", "/endpoints", body)
        state["target"] = state["endpoint"]
        if kind == "add secret" or "secret" not in state:
            status, found = self.call("POST", f"/endpoints/{state['endpoint']}/secrets", {"value": whsec(f"add-{i}")})
            state["secret"] = found.get("id")
            return "add secret", status, found
        secret = state.pop("secret")
        return kind, *self.call("POST", f"/endpoints/{state['endpoint']}/secrets/{secret}/expire", {})

    def run(self) -> None:
        engine = sa.create_engine(self.db, isolation_level="AUTOCOMMIT")
        state: dict[str, Any] = {}
        try:
            with engine.connect() as conn:
                start = time.monotonic()
                for i in range(self.count):
                    if self.stop.wait(max(0.0, start + i - time.monotonic())) or self.stop.is_set():
                        return
                    sent = time.monotonic()
                    kind, status, found = self.change(i, state)
                    answered = time.monotonic()
                    version = int(conn.execute(sa.text(SQL_VERSION)).scalar_one())
                    record = {"i": i, "kind": kind, "status": status, "version": version, "target": state["target"]}
                    record |= {"sent": sent, "answered": answered, "api_ms": (answered - sent) * 1000}
                    if status >= 300:
                        record["error"] = found
                    self.changes.append(record)
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            engine.dispose()


class Listener(threading.Thread):
    """LISTENs on the configuration channel as every process does: when each change's commit was
    announced (PostgreSQL delivers the notice at commit), on this process's clock."""

    def __init__(self, db: str) -> None:
        super().__init__(name="listener", daemon=True)
        self.url = db.replace("postgresql+psycopg://", "postgresql://")
        self.notices: list[tuple[float, str]] = []  # (monotonic time received, payload: the change's target)
        self.stop = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        import psycopg

        from webhooks.store.configuration.items import CHANNEL

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.ready.set()
            while not self.stop.is_set():
                for notice in conn.notifies(timeout=0.2):
                    self.notices.append((time.monotonic(), notice.payload))


def committed(changes: list[dict[str, Any]], notices: list[tuple[float, str]]) -> None:
    """Give each accepted change ``committed``: when its notice came (changes are made one at a
    time, so the n-th notice is the n-th accepted change's; its target is checked)."""
    accepted = [c for c in changes if "error" not in c]
    for change, (at, target) in zip(accepted, notices, strict=False):
        if target.split(" ", 1)[-1] == change["target"]:
            change["committed"] = at


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (q in 0–100) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"count": 0}
    return {
        "count": len(values),
        "p50_ms": percentile(values, 50) * 1000,
        "p99_ms": percentile(values, 99) * 1000,
        "max_ms": max(values) * 1000,
    }


def propagation(changes: list[dict[str, Any]], found: list[Poller], since: str = "answered") -> dict[str, Any]:
    """Per (change, web process): seconds from the change's ``since`` (its API answer, or its
    commit's notice) to the first poll answer holding its version (0 when that came first)."""
    samples: list[float] = []
    per_process: dict[str, list[float]] = {str(p.pid): [] for p in found}
    missed = 0
    for change in changes:
        if "error" in change or since not in change:
            continue
        for poller in found:
            at = poller.first_at(change["version"])
            if at is None:
                missed += 1
                continue
            took = max(0.0, at - change[since])
            samples.append(took)
            per_process[str(poller.pid)].append(took)
    round_trips = [t for p in found for t in p.round_trips]
    return {
        **summary(samples),
        "missed": missed,
        "per_process": {pid: summary(values) for pid, values in per_process.items()},
        "poll_round_trip": summary(round_trips),
        "pins": {str(p.pid): p.pins for p in found},
        "poll_failures": sum(p.failures for p in found),
    }


# ----- the run ---------------------------------------------------------------------------------
def ingest(work: Path, dep: dict[str, Any], case: str, seconds: int, connections: int) -> dict[str, Any]:
    events = signed_events(seconds * NEW_PER_SECOND, case[0])
    script = lua_script(work / f"{case[0]}.lua", events)
    run = wrk(f"http://127.0.0.1:{dep['port']}/webhooks/stripe", script, seconds, connections)
    run["wrapped"] = run["requests"] > len(events)  # some were duplicates: NEW_PER_SECOND too low
    return {"case": case, **run, "load": os.getloadavg()}


def ingest_while(
    work: Path, dep: dict[str, Any], churn: Churn, seconds: int, connections: int, most: int = 4
) -> dict[str, Any]:
    """Ingest (c): wrk runs of ``seconds`` one after another while ``churn`` still has changes to
    make (at most ``most``); then the churn stops. Requests/s over all runs, p50 their median,
    p99 and max the highest."""
    runs = []
    churn.start()
    try:
        while len(runs) < most and (not runs or churn.is_alive()):
            runs.append(ingest(work, dep, f"c{len(runs)}", seconds, connections))
    finally:
        churn.stop.set()
        ended = time.monotonic()
        churn.join()
    requests = sum(r["requests"] for r in runs)
    return {
        "case": "(c) filled, changes through the API",
        "rps": requests / sum(r["requests"] / r["rps"] for r in runs),
        "p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "p99_ms": max(r["p99_ms"] for r in runs),
        "max_ms": max(r["max_ms"] for r in runs),
        "requests": requests,
        "non2xx": sum(r["non2xx"] for r in runs),
        "socket_errors": sum(r["socket_errors"] for r in runs),
        "wrapped": any(r["wrapped"] for r in runs),
        "runs": runs,
        "ended": ended,
    }


def row(label: str, value: str, goal: str = "") -> str:
    return f"{label:<52}{value:>24}  {goal}"


def report(results: dict[str, Any]) -> str:
    fill_s = results["fill_s"]
    e, f = results["empty"], results["filled"]
    a, b, c = e["ingest"], f["ingest"], f["ingest_churn"]
    p = results["propagation"]
    items = results["endpoints"] + results["destinations"]
    lines = [
        row("fill (one transaction)", f"{fill_s:.1f} s", f"{items} items, {items / fill_s:.0f} items/s"),
        "",
        row("start-up", "empty · filled", ""),
        row("  gunicorn started → first /healthz", f"{e['startup_s']:.2f} · {f['startup_s']:.2f} s", "goal < 2 s"),
        row(
            "  create_app() in-process",
            f"{e['create_app_s']:.2f} · {f['create_app_s']:.2f} s",
            f"goal < 2 s; holds {f['holds'][0]} endpoints, {f['holds'][1]} destinations",
        ),
        row(
            "  create_app() in a fresh interpreter",
            f"{sum(e['cold_s']):.2f} · {sum(f['cold_s']):.2f} s",
            "as a web process: its modules imported inside",
        ),
        row(
            "one change in-process, filled, no load: API PATCH · reload",
            f"{f['one_change']['api_patch_s']:.2f} · {f['one_change']['reload_s']:.2f} s",
            "the answering process · every other process",
        ),
        "",
        f"{'ingest (first deliveries to stripe)':<40}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}  answers",
    ]
    for run in (a, b, c):
        bad = run["non2xx"] + run["socket_errors"]
        answers = "all 2xx" if not bad else f"{run['non2xx']} non-2xx, {run['socket_errors']} socket errors"
        lines.append(f"{run['case']:<40}{run['rps']:>8.0f}{run['p50_ms']:>8.1f}{run['p99_ms']:>8.1f}  {answers}")
    lines += [
        row("ratio b/a (filled ÷ empty)", f"{b['rps'] / a['rps']:.2f}", "goal ≥ 0.9"),
        row("ratio c/b (changing ÷ unchanged)", f"{c['rps'] / b['rps']:.2f}", ""),
        row("p99 b/a · c/b", f"{b['p99_ms'] / a['p99_ms']:.2f} · {c['p99_ms'] / b['p99_ms']:.2f}", ""),
        "",
    ]
    changes = results["changes"]
    kinds = ", ".join(f"{k} {n}" for k, n in results["change_counts"].items())
    failed = [ch for ch in changes if "error" in ch]
    loaded = sum(1 for ch in changes if ch["under_load"])
    lines.append(row("changes through the admin API (one at a time)", str(len(changes)), kinds))
    if changes:
        span = changes[-1]["answered"] - changes[0]["sent"]
        lines.append(row("  answered while wrk ran · changes a second", f"{loaded} · {len(changes) / span:.2f}", ""))
    if failed:
        lines.append(row("  refused", str(len(failed)), str(failed[0]["error"])[:80]))
    api = [ch["api_ms"] / 1000 for ch in changes]
    if api:
        lines.append(row("  API answer p50 · max", f"{summary(api)['p50_ms']:.0f} · {max(api) * 1000:.0f} ms"))
    for title, key, goal in (
        ("propagation from the API answer p50 · p99 · max", "propagation", "goal p99 ≤ 1000 ms"),
        ("propagation from the commit's notice p50 · p99 · max", "propagation_from_commit", ""),
    ):
        p = results[key]
        if not p["count"]:
            continue
        lines.append(
            row(
                title,
                f"{p['p50_ms']:.0f} · {p['p99_ms']:.0f} · {p['max_ms']:.0f} ms",
                f"{goal}; {p['count']} samples (change × web process), {p['missed']} never seen".lstrip("; "),
            )
        )
        for pid, s in p["per_process"].items():
            if s["count"]:
                figures = f"{s['p50_ms']:.0f} · {s['p99_ms']:.0f} · {s['max_ms']:.0f} ms"
                lines.append(row(f"  web process {pid}", figures))
    p = results["propagation"]
    if p["count"]:
        rt = p["poll_round_trip"]
        lines.append(
            row(
                "/healthz poll round trip p50 · p99",
                f"{rt['p50_ms']:.1f} · {rt['p99_ms']:.1f} ms",
                f"every {POLL * 1000:.0f} ms; pins {sum(p['pins'].values())}, failures {p['poll_failures']}",
            )
        )
    lines += [
        "the worker process has no HTTP: its propagation is not measured here (its watcher is the same code)",
        f"load average (1, 5, 15 min): start {results['load_start']}, end {results['load_end']}; "
        f"{os.cpu_count()} cores shared by everything",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--endpoints", type=int, default=10_000, help="endpoints in the database")
    parser.add_argument("--destinations", type=int, default=1_000, help="destinations in the database")
    parser.add_argument("--seconds", type=int, default=60, help="the three ingest runs together (each a third)")
    parser.add_argument("--connections", type=int, default=16, help="wrk's connections")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.endpoints < 1 or args.destinations < 1 or args.seconds < 3:
        parser.error("--endpoints and --destinations need at least 1, --seconds at least 3")
    ensure_tools()
    work = workdir()
    third = args.seconds // 3
    results: dict[str, Any] = {
        "endpoints": args.endpoints,
        "destinations": args.destinations,
        "seconds_per_run": third,
        "connections": args.connections,
        "load_start": [round(x, 2) for x in os.getloadavg()],
    }
    with scratch_database() as db:
        env = environment(work, db)
        create_app_seconds(env)  # imports and first connections: not start-up's cost on either side
        took, *_ = create_app_seconds(env)
        cold = cold_create_app(env)
        with deployment(work, db, "empty") as dep, pollers(dep):
            ingested = ingest(work, dep, "(a) empty database", third, args.connections)
        results["empty"] = {"create_app_s": took, "cold_s": cold, "startup_s": dep["startup_s"], "ingest": ingested}
        print(f"empty: create_app {took:.2f} s, gunicorn {dep['startup_s']:.2f} s, ingest {ingested['rps']:.0f} req/s")
    with scratch_database() as db:
        env = environment(work, db)
        print(f"filling {args.endpoints} endpoints and {args.destinations} destinations …", flush=True)
        results["fill_s"] = fill(db, args.endpoints, args.destinations)
        print(f"fill: {results['fill_s']:.1f} s", flush=True)
        took, *holds = create_app_seconds(env)
        filled: dict[str, Any] = {"create_app_s": took, "holds": holds, "cold_s": cold_create_app(env)}
        filled["one_change"] = one_change_seconds(env, f"ep-{args.endpoints - 1}")
        with deployment(work, db, "filled") as dep, pollers(dep) as found:
            filled["startup_s"] = dep["startup_s"]
            print(f"filled: create_app {took:.2f} s, gunicorn {dep['startup_s']:.2f} s", flush=True)
            filled["ingest"] = ingest(work, dep, "(b) filled, no changes", third, args.connections)
            listener = Listener(db)
            listener.start()
            listener.ready.wait(30)
            churn = Churn(dep["port"], db, third, args.endpoints, args.destinations)
            try:
                filled["ingest_churn"] = ingest_while(work, dep, churn, third, args.connections)
                if churn.error is not None:
                    raise churn.error
                last = max((c["version"] for c in churn.changes), default=0)
                deadline = time.monotonic() + 10  # the last changes' propagation
                while time.monotonic() < deadline and not all(p.first_at(last) for p in found):
                    time.sleep(0.05)
            finally:
                listener.stop.set()
                listener.join(5)
        committed(churn.changes, listener.notices)
        ended = filled["ingest_churn"].pop("ended")
        for change in churn.changes:
            change["under_load"] = change["answered"] <= ended
        results["filled"] = filled
        results["changes"] = churn.changes
        results["propagation"] = propagation(churn.changes, found)
        results["propagation_from_commit"] = propagation(churn.changes, found, "committed")
        results["change_counts"] = {k: sum(1 for c in churn.changes if c["kind"] == k) for k in CHANGE_KINDS}
        results["rows_stored"] = scalar(db, "SELECT count(*) FROM events")
    results["load_end"] = [round(x, 2) for x in os.getloadavg()]
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
