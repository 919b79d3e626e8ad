"""Workers: events processed end to end against no-op RQ jobs, same worker class, same run.

    .venv/bin/python benchmarks/workers.py [--events 1000] [--workers 1 2] [--rounds 3] [--json out.json]

For each worker count: (1) a no-op RQ job (RQ's own enqueue, a function that returns None) drained
by that many processes of the production worker class (``webhooks.jobs.worker.Worker``, RQ's
non-forking worker); (2) the same number of stored Stripe events processed by that many
``webhooks worker`` processes with a no-op handler (claim, object-state upsert, handler, mark
processed). Workers start first and idle on an empty queue; then every job is queued at once and
the rate is jobs / (last job's end − the moment they were queued). Fresh PostgreSQL database and
Redis (TEST_DATABASE_URL, BENCH_REDIS_URL). Each round measures both, one after the other; the
ratio printed is the median of the rounds' ratios (a single drain of a few seconds on a shared
2-core machine varies by ±15 %).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import redis
from common import BIN, REDIS, base_env, process, scalar, scratch_database, signed, workdir  # script's folder
from rq import Queue, Worker
from rq.job import Job

NOOP_WORKER = """
import sys
from redis import Redis
from rq import Queue
from webhooks.jobs.worker import Worker
connection = Redis.from_url(sys.argv[1])
Worker([Queue("default", connection=connection)], connection=connection).work()
"""


@contextlib.contextmanager
def workers(cmd: list[str], env: dict[str, str], count: int, work: Path) -> Iterator[None]:
    """``count`` worker processes, up and registered with Redis before the jobs are queued."""
    connection = redis.Redis.from_url(REDIS)
    with contextlib.ExitStack() as stack:
        for i in range(count):
            stack.enter_context(process(cmd, env, work, log=work / f"worker{i}.log"))
        deadline = time.monotonic() + 120
        while len(Worker.all(connection=connection)) < count:
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not start")
            time.sleep(0.1)
        yield


def drained(connection: redis.Redis, ids: list[str], queued_at: datetime, timeout: float = 600) -> float:
    """Jobs per second, once every job in ``ids`` has ended (finished or failed)."""
    deadline = time.monotonic() + timeout
    while True:
        ends = []
        with connection.pipeline(transaction=False) as pipe:
            for jid in ids:
                pipe.hget(Job.key_for(jid), "ended_at")
            ends = pipe.execute()
        if all(ends):
            last = max(datetime.fromisoformat(e.decode().replace("Z", "+00:00")) for e in ends)
            return len(ids) / (last - queued_at).total_seconds()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{sum(1 for e in ends if not e)} jobs still not done")
        time.sleep(0.2)


def rq_noop(count: int, n: int, env: dict[str, str], work: Path) -> float:
    connection = redis.Redis.from_url(REDIS)
    connection.flushdb()
    (work / "noop_worker.py").write_text(NOOP_WORKER)
    with workers([str(BIN / "python"), str(work / "noop_worker.py"), REDIS], env, count, work):
        queue = Queue("default", connection=connection)
        queued_at = datetime.now(UTC)
        with connection.pipeline() as pipe:
            jobs = queue.enqueue_many(
                [Queue.prepare_data("bench_handlers.noop_job", (i,)) for i in range(n)], pipeline=pipe
            )
            pipe.execute()
        return drained(connection, [j.id for j in jobs], queued_at)


def events(count: int, n: int, env: dict[str, str], work: Path, profile: Path | None = None) -> float:
    from webhooks import create_app
    from webhooks.queue import job_id
    from webhooks.receiver.rows import event_rows

    connection = redis.Redis.from_url(REDIS)
    connection.flushdb()
    with scratch_database() as db:
        app = create_app({**env, "DATABASE_URL": db, "REDIS_URL": REDIS, "WEBHOOKS_EMBEDDED_WORKER": "false"})
        rt = app.extensions["webhooks"]
        endpoint = rt.settings.endpoints["stripe"]
        from webhooks.providers.base import Request
        from webhooks.receiver.receive import verify

        t, ids = int(time.time()), []
        inserts = rt.store.inserts()  # stored, not queued: the jobs are queued at once below, timed
        for i in range(n):
            header, body = signed(f"evt_w{count}_{i}", t, i)
            verified = verify(endpoint, Request({"stripe-signature": header}, body.encode(), "http://x/"), t)
            inserts.insert(event_rows(endpoint, verified, body.encode(), {}, datetime.now(UTC)), lambda _: [])
            ids.append(f"evt_w{count}_{i}")
        inserts.drop()
        wenv = {**env, "DATABASE_URL": db, "REDIS_URL": REDIS, "WEBHOOKS_HANDLERS": "bench_handlers"}
        with workers([str(BIN / "webhooks"), "worker"], wenv, count, work):
            spy = None
            if profile:  # the first worker process, while it drains
                pid = next(w.pid for w in Worker.all(connection=connection))
                spy = subprocess.Popen(
                    [
                        str(BIN / "py-spy"),
                        "record",
                        "--pid",
                        str(pid),
                        "--format",
                        "raw",
                        "--output",
                        str(profile),
                        "--nonblocking",
                        "--gil",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1)
            queued_at = datetime.now(UTC)
            rt.queue.enqueue_many([("stripe", i) for i in ids])
            rate = drained(connection, [job_id("stripe", i) for i in ids], queued_at)
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                spy.wait()
        processed = scalar(db, "SELECT count(*) FROM events WHERE status = 'processed'")
        rt.engine.dispose()
        if processed != n:
            raise RuntimeError(f"{processed} of {n} events processed")
        return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--profile", type=Path, help="py-spy (GIL holders) of one `webhooks worker`, raw stacks")
    args = parser.parse_args()
    work = workdir()
    env = base_env(work)
    results = []
    for count in args.workers:
        rounds = []
        for r in range(args.rounds):
            base = rq_noop(count, args.events, env, work)
            profile = args.profile if count == args.workers[0] and r == 0 else None
            ours = events(count, args.events, env, work, profile)
            rounds.append({"rq_noop_per_s": base, "events_per_s": ours, "ratio": ours / base})
        results.append({"workers": count, "rounds": rounds, "ratio": statistics.median(r["ratio"] for r in rounds)})
    print(f"{'worker processes':<18}{'no-op RQ jobs/s':>18}{'events/s':>16}{'× no-op (rounds)':>26}{'median':>8}")
    for res in results:
        columns = {
            key: " ".join(f"{r[key]:{spec}}" for r in res["rounds"])
            for key, spec in (("rq_noop_per_s", ".0f"), ("events_per_s", ".0f"), ("ratio", ".2f"))
        }
        print(
            f"{res['workers']:<18}{columns['rq_noop_per_s']:>18}{columns['events_per_s']:>16}"
            f"{columns['ratio']:>26}{res['ratio']:>8.2f}"
        )
    print(f"{args.events} jobs per case and round; worker class webhooks.jobs.worker.Worker (RQ SimpleWorker)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
