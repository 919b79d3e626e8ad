"""Scale-out: two web instances (separate gunicorn masters) and two workers on one PostgreSQL and
one Redis, under a mixed storm sent to both at once.

    .venv/bin/python benchmarks/scaleout.py [--seconds 8] [--connections 16]

Each instance is one gunicorn master with WEB_CONCURRENCY processes (default 1); two wrk processes
(half the connections each) post the mixed storm (1 new : 2 duplicates) to one instance each while
two ``webhooks worker`` processes drain. Prints requests/s per instance, events stored, how long the
workers took to process them all, and checks every event was stored once and processed once.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    ensure_tools()
    work = workdir()
    with scratch_database() as db:
        env = base_env(work, DATABASE_URL=db, REDIS_URL=REDIS, WEBHOOKS_HANDLERS="bench_handlers", WEB_CONCURRENCY="1")
        ports = [free_port(), free_port()]
        with contextlib.ExitStack() as stack:
            for port in ports:
                stack.enter_context(gunicorn("webhooks:create_app()", env, port))
            for i in range(2):
                stack.enter_context(process([str(BIN / "webhooks"), "worker"], env, log=work / f"worker{i}.log"))
            stored = signed_events(2000, "dup")
            prime(f"http://127.0.0.1:{ports[0]}/webhooks/stripe", stored)
            results: list[dict[str, Any]] = [{}, {}]

            def load(k: int) -> None:
                new = signed_events(args.seconds * 2000, f"s{k}")
                script = lua_script(work / f"storm{k}.lua", new, stored, 3)
                results[k] = wrk(
                    f"http://127.0.0.1:{ports[k]}/webhooks/stripe", script, args.seconds, args.connections // 2
                )

            threads = [threading.Thread(target=load, args=(k,)) for k in range(2)]
            started = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
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
            f"instance {k + 1}: {r['rps']:.0f} req/s, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
            f"{r['non2xx']} non-2xx, {r['socket_errors']} socket errors"
        )
    new = total - len(stored)
    print(
        f"both: {sum(r['rps'] for r in results):.0f} req/s; {new} new events stored ({new / ingest_done:.0f}/s "
        f"over the {ingest_done:.1f} s storm) besides {len(stored)} primed; all {total} processed "
        f"{drained:.1f} s after the storm began ({total / drained:.0f} events/s by 2 workers)"
    )
    print(f"each event stored once and processed in one attempt: {check}")


if __name__ == "__main__":
    main()
