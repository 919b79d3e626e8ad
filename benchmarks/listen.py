"""Listen (#41): how soon an event stored on the receiver reaches ``webhooks listen``'s local URL, and
what ten open streams cost the receiver's ingest, measured in the same run.

    .venv/bin/python benchmarks/listen.py [--events 300] [--rate 20] [--seconds 4] [--rounds 3] [--json out.json]
    .venv/bin/python benchmarks/listen.py --production  # gunicorn, PostgreSQL + Redis (TEST_DATABASE_URL)

The receiver is ``webhooks serve`` (SQLite, two web processes) by default. Latency: ``webhooks listen``
(a real process) forwards to a local HTTP server; ``--events`` deliveries are posted at ``--rate`` a
second from one thread, and each event's latency is its arrival at the local URL minus the moment
its delivery's 200 came back (the event was committed before it). Cost: wrk posts first deliveries
with no stream open, then with ten (``curl -N`` readers at nice 19, each receiving every event), in
interleaved rounds; the ratio is ingest with ten streams over ingest with none (median round,
spread in brackets).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from common import (  # the script's folder is on sys.path
    BIN,
    REDIS,
    base_env,
    free_port,
    gunicorn,
    lua_script,
    process,
    scratch_database,
    signed_events,
    table,
    workdir,
    wrk,
)

KEEPALIVE = 10.0  # webhooks.admin.stream.KEEPALIVE
NEW_PER_SECOND = 6000  # more than the receiver takes: a run never wraps round to a stored event
PASSWORD = "bench-admin"


class Sink:
    """The developer's local URL: the arrival time of each event id."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                sink.arrived[json.loads(body)["id"]] = time.monotonic()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def post(url: str, entry: tuple[str, str]) -> None:
    request = urllib.request.Request(
        url,
        data=entry[1].encode(),
        method="POST",
        headers={"Stripe-Signature": entry[0], "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200


def latency(base: str, token: str, env: dict[str, str], work: Path, events: int, rate: float) -> dict[str, Any]:
    sink = Sink()
    cmd = [
        str(BIN / "webhooks"),
        "listen",
        base,
        "--token",
        token,
        "--forward-to",
        sink.url,
        "--state",
        str(work / "s.json"),
    ]
    with process(cmd, env, cwd=work, log=work / "listen.log"):
        time.sleep(2.0)  # the listener connects (its stream opens from now)
        acked: dict[str, float] = {}
        entries = signed_events(events, "lat")
        started = time.monotonic()
        for n, entry in enumerate(entries):
            time.sleep(max(0.0, started + n / rate - time.monotonic()))
            post(f"{base}/webhooks/stripe", entry)
            acked[json.loads(entry[1])["id"]] = time.monotonic()
        deadline = time.monotonic() + 30
        while len(sink.arrived) < events and time.monotonic() < deadline:
            time.sleep(0.05)
    sink.server.shutdown()
    waits = sorted(sink.arrived[e] - acked[e] for e in acked if e in sink.arrived)
    assert len(waits) == events, f"{events - len(waits)} events never reached the local URL"
    return {
        "events": events,
        "rate": rate,
        "p50_ms": round(statistics.median(waits) * 1000, 1),
        "p99_ms": round(waits[int(0.99 * (len(waits) - 1))] * 1000, 1),
        "max_ms": round(waits[-1] * 1000, 1),
    }


@contextlib.contextmanager
def readers(base: str, token: str, count: int, query: str = "") -> Any:
    """``count`` streams held open by ``curl -N``, each reading every event it matches (and throwing
    it away). At nice 19: they stand for laptops elsewhere (here they share the receiver's cores)."""
    url = f"{base}/admin/api/stream{query}"
    cmd = ["nice", "-n", "19", "curl", "-sN", "-H", f"Authorization: Bearer {token}", url]
    procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(count)]
    try:
        time.sleep(1.5)  # they connect
        assert all(p.poll() is None for p in procs), "a stream was refused (the cap?)"
        yield procs
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


def cost(
    base: str, token: str, work: Path, seconds: int, rounds: int, connections: int, query: str = ""
) -> dict[str, Any]:
    url = f"{base}/webhooks/stripe"
    pairs = []
    for r in range(rounds):
        new = seconds * NEW_PER_SECOND
        quiet = wrk(url, lua_script(work / f"q{query and 'f'}{r}.lua", signed_events(new, "q")), seconds, connections)
        with readers(base, token, 10, query):
            busy = wrk(
                url, lua_script(work / f"b{query and 'f'}{r}.lua", signed_events(new, "b")), seconds, connections
            )
        pairs.append((quiet, busy))
        time.sleep(KEEPALIVE)  # the streams' slots free up once the receiver sees their readers gone
    pairs.sort(key=lambda pair: pair[1]["rps"] / pair[0]["rps"])
    quiet, busy = pairs[len(pairs) // 2]
    return {
        "quiet": {"case": "first deliveries, no stream open", **quiet},
        "busy": {
            "case": f"first deliveries, 10 streams{' (none match)' if query else ''}",
            **busy,
            "ratios": [round(b["rps"] / q["rps"], 2) for q, b in pairs],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--rate", type=float, default=20.0, help="deliveries a second in the latency run")
    parser.add_argument("--seconds", type=int, default=4, help="length of one wrk run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--production", action="store_true", help="gunicorn on PostgreSQL + Redis instead of serve")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True)
    work = workdir()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # Ten streams over two web processes: the cap (8 a process, half of WEB_THREADS) is raised so
    # that however the kernel spreads them, none is refused.
    extra = {"WEBHOOKS_ADMIN_PASSWORD": PASSWORD, "WEB_THREADS": "32", "WEBHOOKS_LISTENERS_MAX": "10"}
    with contextlib.ExitStack() as stack:
        if args.production:
            db = stack.enter_context(scratch_database())
            env = base_env(work, DATABASE_URL=db, REDIS_URL=REDIS, **extra)
        else:
            env = base_env(work, WEBHOOKS_HANDLERS="bench_handlers", **extra)
            for name in ("DATABASE_URL", "REDIS_URL"):
                env.pop(name, None)
            subprocess.run([str(BIN / "webhooks"), "db", "upgrade"], env=env, cwd=work, check=True, capture_output=True)
        made = subprocess.run(
            [str(BIN / "webhooks"), "tokens", "create", "bench", "--read-only"],
            env=env,
            cwd=work,
            check=True,
            capture_output=True,
            text=True,
        )
        token = made.stdout.strip().splitlines()[-1]
        if args.production:
            stack.enter_context(gunicorn("webhooks:create_app()", env, port))
        else:
            cmd = [str(BIN / "webhooks"), "serve", "--port", str(port)]
            stack.enter_context(process(cmd, env, cwd=work, up=f"{base}/"))
        lat = latency(base, token, env, work, args.events, args.rate)
        spent = cost(base, token, work, args.seconds, args.rounds, args.connections)
        # The control: ten streams whose filter matches nothing. The receiver reads every row for
        # them as for the others, and sends nothing: what is left is the cost of the sending.
        control = cost(base, token, work, args.seconds, args.rounds, args.connections, "?type=matches.nothing")
    print(
        f"receiver: {'gunicorn on PostgreSQL + Redis' if args.production else 'webhooks serve (SQLite)'}, "
        f"{env['WEB_CONCURRENCY']} web processes; {os.cpu_count()} cores shared by everything"
    )
    print(
        f"stored → local URL over {lat['events']} events at {lat['rate']:g}/s: "
        f"p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms"
    )
    print(table([spent["quiet"], spent["busy"], control["quiet"], control["busy"]]))
    for what, found in (("10 streams, every event", spent), ("10 streams, none matching", control)):
        ratio = found["busy"]["rps"] / found["quiet"]["rps"]
        print(f"ingest with {what} / with none: {ratio:.2f} (rounds {found['busy']['ratios']})")
    if args.json:
        args.json.write_text(json.dumps({"latency": lat, "cost": spent, "control": control}, indent=1))


if __name__ == "__main__":
    main()
