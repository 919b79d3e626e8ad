"""Scale-out: web instances (separate gunicorn masters) on one PostgreSQL and one Redis.

    .venv/bin/python benchmarks/scaleout.py [--seconds 6] [--rounds 3] [--connections 16]

First the ratio: first deliveries into one instance, then into two (half the connections each), in
rounds, the median reported; instance *k* is pinned to core *k* (``sched_setaffinity`` on each of
its processes' threads) so that "one instance" means one core of web CPU and "two" means two, while
wrk, PostgreSQL and Redis run where the kernel puts them. Then the storm: two ``webhooks worker``
processes drain while both instances take the mixed storm (1 new : 2 duplicates); it checks every
event was stored once and processed once.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
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
    workdir,
    wrk,
)

NEW_PER_SECOND = 4000  # more than one instance takes: a run never wraps round to a stored event


def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it (Linux ``/proc``)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").iterdir():
            with contextlib.suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return found


def pin(pid: int, cpu: int) -> None:
    """Every thread of ``pid`` and of its descendants onto ``cpu`` (threads started later inherit)."""
    for proc in descendants(pid):
        for task in Path(f"/proc/{proc}/task").iterdir():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task.name), {cpu})


def storm(urls: list[str], scripts: list[Path], seconds: int, connections: int) -> list[dict[str, Any]]:
    """wrk against each URL at once, ``connections`` shared out; each one's result."""
    results: list[dict[str, Any]] = [{} for _ in urls]

    def load(k: int) -> None:
        results[k] = wrk(urls[k], scripts[k], seconds, connections // len(urls))

    threads = [threading.Thread(target=load, args=(k,)) for k in range(len(urls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def ratio(urls: list[str], work: Path, args: argparse.Namespace) -> None:
    """First deliveries into one instance, then into two: the rounds' ratios and their median."""
    warm = [lua_script(work / f"warm{k}.lua", signed_events(2000, f"w{k}")) for k in range(2)]
    storm(urls, warm, 2, args.connections)  # both instances' processes started and connected
    rounds = []
    for r in range(args.rounds):
        per_run = args.seconds * NEW_PER_SECOND
        one = storm(
            urls[:1],
            [lua_script(work / f"one{r}.lua", signed_events(per_run, f"o{r}"))],
            args.seconds,
            args.connections,
        )
        two_scripts = [lua_script(work / f"two{r}_{k}.lua", signed_events(per_run, f"t{r}{k}")) for k in range(2)]
        two = storm(urls, two_scripts, args.seconds, args.connections)
        rps_one, rps_two = one[0]["rps"], sum(x["rps"] for x in two)
        errors = sum(x["non2xx"] + x["socket_errors"] for x in one + two)
        rounds.append((rps_two / rps_one, rps_one, rps_two, max(x["p99_ms"] for x in two), one[0]["p99_ms"], errors))
        print(
            f"round {r + 1}: one instance {rps_one:.0f} req/s (p99 {one[0]['p99_ms']:.1f} ms), two "
            f"{rps_two:.0f} req/s (p99 {rounds[-1][3]:.1f} ms): {rps_two / rps_one:.2f} ×; {errors} errors"
        )
    median = statistics.median(x[0] for x in rounds)
    print(
        f"first deliveries, two instances / one, median of {args.rounds}: {median:.2f} × "
        f"(rounds {', '.join(f'{x[0]:.2f}' for x in rounds)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    ensure_tools()
    work = workdir()
    with scratch_database() as db:
        env = base_env(work, DATABASE_URL=db, REDIS_URL=REDIS, WEBHOOKS_HANDLERS="bench_handlers", WEB_CONCURRENCY="1")
        ports = [free_port(), free_port()]
        urls = [f"http://127.0.0.1:{port}/webhooks/stripe" for port in ports]
        with contextlib.ExitStack() as stack:
            for cpu, port in enumerate(ports):
                pin(stack.enter_context(gunicorn("webhooks:create_app()", env, port)).pid, cpu % (os.cpu_count() or 1))
            ratio(urls, work, args)
            before = scalar(db, "SELECT count(*) FROM events")
            for i in range(2):
                stack.enter_context(process([str(BIN / "webhooks"), "worker"], env, log=work / f"worker{i}.log"))
            stored = signed_events(2000, "dup")
            prime(urls[0], stored)
            scripts = [
                lua_script(work / f"storm{k}.lua", signed_events(args.seconds * 2000, f"s{k}"), stored, 3)
                for k in range(2)
            ]
            started = time.monotonic()
            results = storm(urls, scripts, args.seconds, args.connections)
            ingest_done = time.monotonic() - started
            total = scalar(db, "SELECT count(*) FROM events")
            deadline = time.monotonic() + 600
            while scalar(db, "SELECT count(*) FROM events WHERE status = 'processed'") < total:
                if time.monotonic() > deadline:
                    raise RuntimeError("workers did not finish")
                time.sleep(0.5)
            drained = time.monotonic() - started
        check = scalar(db, "SELECT count(*) = count(DISTINCT (endpoint, event_id)) AND max(attempts) = 1 FROM events")
    for k, r in enumerate(results):
        print(
            f"storm, instance {k + 1}: {r['rps']:.0f} req/s, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
            f"{r['non2xx']} non-2xx, {r['socket_errors']} socket errors"
        )
    new = total - before - len(stored)
    print(
        f"both: {sum(r['rps'] for r in results):.0f} req/s; {new} new events stored ({new / ingest_done:.0f}/s "
        f"over the {ingest_done:.1f} s storm) besides {before + len(stored)} before it; all {total} processed "
        f"{drained:.1f} s after the storm began ({total / drained:.0f} events/s by 2 workers)"
    )
    print(f"each event stored once and processed in one attempt: {check}")


if __name__ == "__main__":
    main()
