"""Isolation: one endpoint's flood never delays another endpoint's events (issue 30, finding 1).

    .venv/bin/python benchmarks/isolation.py [--serve] [--workers 1] [--seconds 10] [--rate 10]
                                             [--nudges 400] [--slow 20] [--rounds 1] [--json f]

A genuine Stripe endpoint (``stripe``, no API calls) gets ``--rate`` signed events a second for
``--seconds``; its latency is ``processed_at − received_at`` of each, p50/p99. Same run, two
cases per round, each on a fresh database: **alone** (only the genuine stream), then **flood**
(the same stream while ``--nudges`` junk Mollie classic nudges, ``id=tr_<random>``, arrive as fast
as 8 threads post them, and ``--slow`` events go to a Stripe endpoint with ``refetch = true``
whose API hangs until the outbound timeout). The fake APIs run in this process on 127.0.0.1:
Mollie answers 404 after 20 ms, Stripe never answers. Goal: p99 under flood ≤ 2 × p99 alone + 1 s.

Default: gunicorn (the Procfile's config) + ``--workers`` ``webhooks worker`` processes on
PostgreSQL + Redis (TEST_DATABASE_URL, BENCH_REDIS_URL, flushed); ``--serve``: ``webhooks serve``
(SQLite, one embedded worker thread).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from common import (  # script's folder
    BIN,
    REDIS,
    SECRET,
    base_env,
    free_port,
    gunicorn,
    process,
    scratch_database,
    signed,
    workdir,
)

MOLLIE_KEY = "test_dHar4XY7LxsDOtmnkVtjNVWXLSlXsM"
OUTBOUND_TIMEOUT = 10  # the default: a hung Stripe re-fetch holds its call this long


@contextlib.contextmanager
def fake_apis() -> Iterator[tuple[str, str]]:
    """(Mollie's base, Stripe's base): Mollie has no payment (404 after 20 ms); Stripe hangs."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.server.server_port == stripe.server_port:
                stop.wait(OUTBOUND_TIMEOUT * 3)  # past the caller's timeout: it gives up first
            else:
                time.sleep(0.02)
            body = json.dumps({"status": 404, "title": "Not Found"}).encode()
            with contextlib.suppress(OSError):
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    mollie = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stripe = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    for server in (mollie, stripe):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{mollie.server_port}", f"http://127.0.0.1:{stripe.server_port}"
    finally:
        stop.set()
        for server in (mollie, stripe):
            server.shutdown()
            server.server_close()


def config(work: Path, mollie: str, stripe: str, limit: int | None) -> Path:
    """The three endpoints; Mollie's ``rate_limit`` and ``sender_rate_limit`` at ``limit`` (the
    defaults of a kind that signs nothing, 20 and 10 a second, refuse most of a flood at the door:
    ``--limits default`` (None) measures that; the default raises them so the whole flood reaches
    the worker)."""
    path = work / "isolation.toml"
    path.write_text(
        f"""
[endpoints.stripe]
secrets = ["{SECRET}"]

[endpoints.mollie]
api_key = "{MOLLIE_KEY}"
api_base = "{mollie}"
{"" if limit is None else f"rate_limit = {limit}"}
{"" if limit is None else f"sender_rate_limit = {limit}"}

[endpoints.stripe_slow]
provider = "stripe"
secrets = ["{SECRET}"]
api_key = "sk_test_bench"
api_base = "{stripe}"
refetch = true
"""
    )
    return path


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def genuine(base: str, seconds: int, rate: int, tag: str) -> list[str]:
    """``rate`` events a second for ``seconds``, paced by the clock; their ids."""
    ids, t, start = [], int(time.time()), time.monotonic()
    for n in range(seconds * rate):
        time.sleep(max(0.0, start + n / rate - time.monotonic()))  # pacing the load, not ordering events
        event_id = f"evt_iso_{tag}_{n}"
        header, body = signed(event_id, t, n)
        assert post(f"{base}/webhooks/stripe", body.encode(), {"Stripe-Signature": header}) == 200
        ids.append(event_id)
    return ids


def flood(base: str, nudges: int, slow: int, tag: str) -> None:
    t = int(time.time())

    def nudge(n: int) -> int:
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        return post(f"{base}/webhooks/mollie", f"id=tr_{tag}{n:08d}".encode(), form)

    def hung(n: int) -> int:
        header, body = signed(f"evt_slow_{tag}_{n}", t, n)
        return post(f"{base}/webhooks/stripe_slow", body.encode(), {"Stripe-Signature": header})

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(hung, range(slow))) + list(pool.map(nudge, range(nudges)))
    assert all(a in (200, 429) for a in answers), sorted(set(answers))


def latencies(db: str, ids: list[str], deadline: float) -> list[float]:
    """Seconds from received to processed of each genuine event, once all are processed."""
    engine = sa.create_engine(db)
    query = sa.text("SELECT received_at, processed_at FROM events WHERE endpoint = 'stripe' AND status = 'processed'")
    try:
        while True:
            with engine.connect() as conn:
                found = conn.execute(query).all()
            if len(found) >= len(ids):
                return sorted((_at(p) - _at(r)).total_seconds() for r, p in found)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(found)} of {len(ids)} genuine events processed")
            time.sleep(0.5)
    finally:
        engine.dispose()


def _at(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def p(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def case(args: argparse.Namespace, work: Path, flooded: bool, tag: str) -> dict[str, Any]:
    with fake_apis() as (mollie, stripe), contextlib.ExitStack() as stack:
        toml = config(work, mollie, stripe, 100_000 if args.limits == "raised" else None)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        extra = {"WEBHOOKS_CONFIG": str(toml), "WEBHOOKS_OUTBOUND_TIMEOUT_SECONDS": str(OUTBOUND_TIMEOUT)}
        if args.serve:
            run = work / f"serve-{tag}"
            run.mkdir()
            env = base_env(work, **extra)
            for name in ("DATABASE_URL", "REDIS_URL", "STRIPE_WEBHOOK_SECRET"):
                env.pop(name, None)
            cmd = [str(BIN / "webhooks"), "serve", "--port", str(port)]
            stack.enter_context(process(cmd, env, cwd=run, up=f"{base}/", log=run / "serve.log"))
            db = f"sqlite:///{run / 'webhooks.db'}"
        else:
            db = stack.enter_context(scratch_database())
            env = base_env(work, DATABASE_URL=db, REDIS_URL=REDIS, **extra)
            env.pop("STRIPE_WEBHOOK_SECRET")
            stack.enter_context(gunicorn("webhooks:create_app()", env, port))
            for i in range(args.workers):
                cmd = [str(BIN / "webhooks"), "worker"]
                stack.enter_context(process(cmd, env, log=work / f"worker-{tag}-{i}.log"))
        flooder = None
        if flooded:
            flooder = threading.Thread(target=flood, args=(base, args.nudges, args.slow, tag), daemon=True)
            flooder.start()
        ids = genuine(base, args.seconds, args.rate, tag)
        if flooder is not None:
            flooder.join()
        found = latencies(db, ids, time.monotonic() + 600)
        return {"case": "flood" if flooded else "alone", "p50": p(found, 0.5), "p99": p(found, 0.99), "n": len(found)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", action="store_true", help="`webhooks serve` (SQLite, embedded worker)")
    parser.add_argument("--workers", type=int, default=1, help="`webhooks worker` processes (PostgreSQL + Redis)")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rate", type=int, default=10, help="genuine events a second")
    parser.add_argument("--nudges", type=int, default=400)
    parser.add_argument("--slow", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--limits", choices=("raised", "default"), default="raised", help="Mollie's rate limits: raised, or 20/s"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = workdir()
    results = []
    for r in range(args.rounds):
        alone = case(args, work, False, f"a{r}")
        flooded = case(args, work, True, f"f{r}")
        goal = 2 * alone["p99"] + 1
        results.append({"alone": alone, "flood": flooded, "goal_p99": goal, "met": flooded["p99"] <= goal})
    where = (
        "webhooks serve (SQLite, 1 embedded worker thread)"
        if args.serve
        else f"PostgreSQL + Redis, {args.workers} `webhooks worker`"
    )
    print(f"isolation: {where}; {args.seconds * args.rate} genuine events at {args.rate}/s;")
    print(f"flood: {args.nudges} junk Mollie nudges + {args.slow} Stripe events whose re-fetch hangs")
    print(f"{'round':<7}{'alone p50':>11}{'alone p99':>11}{'flood p50':>11}{'flood p99':>11}{'goal p99':>10}{'met':>6}")
    for r, res in enumerate(results):
        a, f = res["alone"], res["flood"]
        print(
            f"{r:<7}{a['p50']:>10.3f}s{a['p99']:>10.3f}s{f['p50']:>10.3f}s{f['p99']:>10.3f}s"
            f"{res['goal_p99']:>9.2f}s{'yes' if res['met'] else 'NO':>6}"
        )
    if args.rounds > 1:
        ratios = [res["flood"]["p99"] / max(res["alone"]["p99"], 1e-3) for res in results]
        print(f"flood p99 ÷ alone p99, median of rounds: {statistics.median(ratios):.2f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
