"""Filters' cost: events processed a second by one ``webhooks worker`` forwarding to 10 destinations,
without filters and with a filter of 5 clauses on each, same run.

    .venv/bin/python benchmarks/filters.py [--events 1000] [--rounds 3] [--json out.json]

Filters decide when an event's deliveries are created (in the processing transaction), so this
measures processing, not sending: the 10 destinations are paused (their ``destinations`` rows), and
the rate is events / (the moment the last is ``processed`` − the moment all were queued), with a
no-op handler. Each filter lets every event through (the worst case: every clause of every
destination is evaluated, and every event still gets its 10 deliveries, as without filters), and
one clause of each reads a request header, so the stored headers are read once per event. Each
round runs both cases on a fresh PostgreSQL database and Redis db (TEST_DATABASE_URL,
BENCH_REDIS_URL), in alternating order; the ratio printed is the median of the rounds' ratios.
Goal (#42): with filters ≥ 0.95 × without.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import redis
import sqlalchemy as sa
from common import BIN, REDIS, base_env, process, scratch_database, signed, workdir  # script's folder

DESTINATIONS = 10
SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
FILTER = (  # five clauses, each true of every event of the run
    '{ "data.object.object" = "payment_intent", "type" = { "$prefix" = "payment_intent." }, '
    '"data.object.id" = { "$exists" = true }, "headers.content-type" = { "$in" = ["application/json"] }, '
    '"$or" = [ { "endpoint" = "stripe" }, { "object_type" = "charge" } ] }'
)


def config(filtered: bool) -> str:
    names = [f"d{i}" for i in range(DESTINATIONS)]
    lines = [
        "[endpoints.stripe]",
        'provider = "stripe"',
        'secrets = ["env:STRIPE_WEBHOOK_SECRET"]',
        f"forward = {json.dumps(names)}",
        "",
    ]
    for name in names:
        lines += [f"[destinations.{name}]", 'url = "http://127.0.0.1:9/in"', f'secrets = ["{SECRET}"]']
        lines += ["allow_private = true", *([f"filter = {FILTER}"] if filtered else []), ""]
    return "\n".join(lines)


def processed_per_s(n: int, filtered: bool, env: dict[str, str], work: Path) -> float:
    from webhooks import create_app
    from webhooks.providers.base import Request
    from webhooks.receiver.receive import verify
    from webhooks.receiver.rows import event_rows
    from webhooks.runtime import watch as config_watch

    redis.Redis.from_url(REDIS).flushdb()
    with scratch_database() as db:
        path = work / "filters.toml"
        path.write_text(config(filtered))
        wenv = {**env, "DATABASE_URL": db, "REDIS_URL": REDIS, "WEBHOOKS_CONFIG": str(path)}
        app = create_app({**wenv, "WEBHOOKS_EMBEDDED_WORKER": "false"})
        rt = app.extensions["webhooks"]
        endpoint = rt.settings.endpoints["stripe"]
        t, ids = int(time.time()), [f"evt_flt_{i}" for i in range(n)]
        inserts = rt.store.inserts()
        headers = {"content-type": "application/json", "user-agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)"}
        for i, event_id in enumerate(ids):
            header, body = signed(event_id, t, i)
            verified = verify(endpoint, Request({"stripe-signature": header}, body.encode(), "http://x/"), t)
            inserts.insert(event_rows(endpoint, verified, body.encode(), headers, datetime.now(UTC)), lambda _: [])
        inserts.drop()
        engine = sa.create_engine(db)
        with engine.begin() as conn:  # paused: deliveries are created, none sent
            for i in range(DESTINATIONS):
                conn.execute(sa.text(f"INSERT INTO destinations (name, paused, failures) VALUES ('d{i}', true, 0)"))
        with process([str(BIN / "webhooks"), "worker"], {**wenv, "WEBHOOKS_HANDLERS": "bench_handlers"}, work):
            deadline = time.monotonic() + 120
            while not redis.Redis.from_url(REDIS).keys("rq:worker:*"):
                if time.monotonic() > deadline:
                    raise RuntimeError("the worker did not start")
                time.sleep(0.1)
            queued_at = datetime.now(UTC)
            rt.queue.enqueue_many([("stripe", i) for i in ids])
            deadline = time.monotonic() + 600
            while True:
                with engine.connect() as conn:
                    done = conn.execute(sa.text("SELECT count(*) FROM events WHERE status = 'processed'")).scalar_one()
                if done >= n:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{done} of {n} processed")
                time.sleep(0.05)
            with engine.connect() as conn:
                last = conn.execute(sa.text("SELECT max(status_at) FROM events")).scalar_one()
                made = conn.execute(sa.text("SELECT count(*) FROM deliveries")).scalar_one()
        engine.dispose()
        rt.engine.dispose()
        config_watch.stop_all()
        if made != n * DESTINATIONS:
            raise RuntimeError(f"{made} deliveries, not {n * DESTINATIONS}")
        return n / (last - queued_at).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = workdir()
    env = base_env(work)
    rounds = []
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        found = {filtered: processed_per_s(args.events, filtered, env, work) for filtered in order}
        rounds.append({"without": found[False], "with": found[True], "ratio": found[True] / found[False]})
    median = statistics.median(r["ratio"] for r in rounds)
    print(f"{'case':<34}{'events processed/s (rounds)':>30}")
    for label, key in (("10 destinations, no filter", "without"), ("10 destinations × 5 clauses", "with")):
        print(f"{label:<34}{' '.join(format(r[key], '.0f') for r in rounds):>30}")
    ratios = " ".join(f"{r['ratio']:.2f}" for r in rounds)
    print(f"with ÷ without: {ratios}; median {median:.2f} (goal ≥ 0.95)")
    print(f"{args.events} events per case and round, one `webhooks worker` (PostgreSQL + Redis), destinations paused")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "median": median}, indent=1))


if __name__ == "__main__":
    main()
