"""Forwarding: deliveries sent a second by one ``webhooks worker`` against its no-op RQ jobs, same run.

    .venv/bin/python benchmarks/forward.py [--kind http|rabbitmq|nats|redis-stream|sqs|kafka] [--events 2000]
                                           [--rounds 3] [--quick] [--profile f] [--json f]

Each round: (1) no-op RQ jobs drained by one process of the production worker class (the baseline
of ``benchmarks/workers.py``); (2) for each case, a fresh PostgreSQL database and Redis db, N stored
Stripe events and one ``webhooks worker`` whose endpoint forwards to one destination: a fast local
service (``SINK``: raw asyncio HTTP/1.1 with keep-alive, its own process, 200 at once). The
destination starts paused (its ``destinations`` row), so the worker first processes every event and
creates its delivery without sending; once all N deliveries exist it is resumed, and the rate is
the forwarding alone: (N − 1) / (last ``delivered_at`` − first), polled from the deliveries table
(the "from resume" column adds the forwarder's pick-up, at most its 0.5 s idle poll). Cases:
unordered, and ``ordered = true`` with the events spread over 100 objects (20 versions each at
N = 2000, sent in version order). Goals: unordered ≥ 0.6 ×, ordered ≥ 0.5 × the no-op jobs/s.

``--kind`` forwards to a bus instead of the sink (``buses.py``: the machine's RabbitMQ, NATS with
JetStream and Redis, or BENCH_AMQP_URL / BENCH_NATS_URL / BENCH_REDIS_URL): a fresh exchange and
queue, stream or key per case, removed after. Beside it, the broker's own client (pika with
publisher confirms, nats-py's JetStream publish, redis-py's XADD) makes the same number of
publishes of the same bodies and headers, one at a time, each acknowledged (Kafka: a Tansu broker
started here, confluent-kafka's idempotent ``acks = all`` producer flushed after each): what the bus itself
allows one sender, the ceiling the forwarder shares. Goals for a bus: unordered ≥ 0.6 ×, ordered
≥ 0.4 × the no-op jobs/s.
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import statistics
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import buses  # script's folder: the bus kinds' targets and their own producers
import redis
import sqlalchemy as sa
import stripe
from common import BIN, REDIS, SECRET, base_env, ensure_tools, free_port, process, scratch_database, workdir
from rq import Worker
from workers import rq_noop, workers  # the no-op baseline, exactly as workers.py measures it

DEST_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # the Standard Webhooks specification's example
SINK = """
import asyncio, sys

async def serve(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\\r\\n\\r\\n")
            length = 0
            for line in head.split(b"\\r\\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if length:
                await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nContent-Type: text/plain\\r\\n\\r\\nok")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()

async def main(port):
    server = await asyncio.start_server(serve, "127.0.0.1", port, backlog=512)
    async with server:
        await server.serve_forever()

asyncio.run(main(int(sys.argv[1])))
"""
CONFIG = """
[endpoints.stripe]
provider = "stripe"
secrets = ["env:STRIPE_WEBHOOK_SECRET"]
forward = ["sink"]

[destinations.sink]
{target}
secrets = ["{secret}"]
allow_private = true
ordered = {ordered}
"""
CASES = {"unordered": (False, 0.6), "ordered (100 objects)": (True, 0.5)}
BUS_GOALS = {"unordered": 0.6, "ordered (100 objects)": 0.4}


def signed(event_id: str, t: int, n: int, objects: int) -> tuple[str, str]:
    """A Stripe delivery about object ``n % objects``, created at ``t + n`` (each object's version rises)."""
    body = json.dumps(
        {
            "id": event_id,
            "object": "event",
            "created": t + n,
            "type": "payment_intent.succeeded",
            "data": {"object": {"id": f"pi_fwd_{n % objects}", "object": "payment_intent"}},
        }
    )
    return stripe.WebhookSignature.generate_signature_header(body, SECRET, timestamp=t), body


@contextmanager
def sink(work: Path, env: dict[str, str]) -> Iterator[int]:
    port = free_port()
    (work / "sink.py").write_text(SINK)
    with process([str(BIN / "python"), str(work / "sink.py"), str(port)], env, work, up=f"http://127.0.0.1:{port}/"):
        yield port


def poll(engine: sa.Engine, sql: str, want: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with engine.connect() as conn:
            have = conn.execute(sa.text(sql)).scalar_one()
        if have >= want:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{have} of {want} after {timeout} s: {sql}")
        time.sleep(0.1)


def spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy on the worker, every thread, wall clock (``--idle``: waits on the network count)."""
    cmd = [str(BIN / "py-spy"), "record", "--pid", str(pid), "--format", "raw", "--threads", "--idle"]
    return subprocess.Popen(
        [*cmd, "--rate", "200", "--output", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@contextmanager
def target(kind: str, work: Path, env: dict[str, str]) -> Iterator[buses.Target]:
    """The destination's TOML lines (and, for a bus, its own producer): the sink, or a fresh bus target."""
    if kind == "http":
        with sink(work, env) as port:
            yield buses.Target(f'url = "http://127.0.0.1:{port}/hooks"', None)
    else:
        with buses.TARGETS[kind]() as found:
            yield found


def forwarding(
    n: int, ordered: bool, env: dict[str, str], work: Path, profile: Path | None, kind: str = "http"
) -> dict[str, float]:
    """One case: store, process (paused), resume, time the sending; for a bus, then its own producer."""
    from webhooks import create_app
    from webhooks.providers.base import Request
    from webhooks.receiver.receive import verify
    from webhooks.receiver.rows import event_rows
    from webhooks.runtime import watch as config_watch

    with target(kind, work, env) as dest, scratch_database() as db:
        config = work / "forward.toml"
        config.write_text(CONFIG.format(target=dest.toml, secret=DEST_SECRET, ordered=str(ordered).lower()))
        wenv = {**env, "DATABASE_URL": db, "REDIS_URL": REDIS, "WEBHOOKS_CONFIG": str(config)}
        app = create_app({**wenv, "WEBHOOKS_EMBEDDED_WORKER": "false"})
        rt = app.extensions["webhooks"]
        endpoint = rt.settings.endpoints["stripe"]
        t, ids = int(time.time()), [f"evt_fwd_{i}" for i in range(n)]
        inserts = rt.store.inserts()
        for i, event_id in enumerate(ids):
            header, body = signed(event_id, t, i, 100 if ordered else n)
            verified = verify(endpoint, Request({"stripe-signature": header}, body.encode(), "http://x/"), t)
            inserts.insert(event_rows(endpoint, verified, body.encode(), {}, datetime.now(UTC)), lambda _: [])
        inserts.drop()
        engine = sa.create_engine(db)
        with engine.begin() as conn:  # paused: the worker creates every delivery and sends none yet
            conn.execute(sa.text("INSERT INTO destinations (name, paused, failures) VALUES ('sink', true, 0)"))
        with workers([str(BIN / "webhooks"), "worker"], {**wenv, "WEBHOOKS_HANDLERS": "bench_handlers"}, 1, work):
            rt.queue.enqueue_many([("stripe", i) for i in ids])
            poll(engine, "SELECT count(*) FROM deliveries", n, 600)
            recorder = None
            if profile is not None:
                recorder = spy(Worker.all(connection=redis.Redis.from_url(REDIS))[0].pid, profile)
                time.sleep(1)
            resumed = datetime.now(UTC)
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE destinations SET paused = false WHERE name = 'sink'"))
            poll(engine, "SELECT count(*) FROM deliveries WHERE status <> 'pending'", n, 600)
            if recorder is not None:
                recorder.send_signal(signal.SIGINT)
                recorder.wait()
        with engine.connect() as conn:
            first, last, delivered, attempts = conn.execute(
                sa.text(
                    "SELECT min(delivered_at), max(delivered_at), count(*) FILTER (WHERE status = 'delivered'),"
                    " (SELECT count(*) FROM delivery_attempts) FROM deliveries"
                )
            ).one()
        engine.dispose()
        rt.engine.dispose()
        config_watch.stop_all()  # this process's app: its database is dropped next
        if delivered != n or attempts != n:
            raise RuntimeError(f"{delivered} of {n} delivered in {attempts} attempts")
        found = {
            "per_s": (n - 1) / (last - first).total_seconds(),
            "from_resume_per_s": n / (last - resumed).total_seconds(),
        }
        if dest.producer is not None:
            bodies = [signed(f"evt_own_{i}", t, i, 100 if ordered else n)[1].encode() for i in range(n)]
            found["broker_per_s"] = dest.producer(bodies)
        return found


def summarize(raw: Path) -> str:
    """Where the forwarder's loop thread (lease, hand out, settle) spent its wall-clock samples, by
    the forwarding code's innermost two lines and the function running; and the sending threads'
    share of their time spent in a request."""
    loop: collections.Counter[str] = collections.Counter()
    senders: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if frames[0].endswith("webhooks-forwarder"):
            ours = [f for f in frames if "deliveries.py" in f or "dispatcher.py" in f][-2:]
            where = " > ".join(f.split(" (")[0] + ":" + f.rsplit(":", 1)[-1].rstrip(")") for f in ours)
            loop[f"{where} | {frames[-1].split(' (')[0]}"] += int(count)
        elif "forward-sink" in frames[0]:
            senders["sending" if any("Lane._send" in f for f in frames) else "idle"] += int(count)
    total = sum(loop.values()) or 1
    lines = [f"the loop thread ({total} samples):"]
    lines += [f"  {100 * c / total:5.1f} %  {k}" for k, c in loop.most_common(14)]
    busy = senders["sending"] / (sum(senders.values()) or 1)
    lines.append(f"the sending threads: {100 * busy:.1f} % of their samples inside a request")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kind", choices=["http", *buses.TARGETS], default="http")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="500 events, one round")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--profile", type=Path, help="py-spy raw stacks of the worker while it forwards (round 1)")
    args = parser.parse_args()
    if args.quick:
        args.events, args.rounds = 500, 1
    if args.profile:
        ensure_tools()
    work = workdir()
    env = base_env(work)
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        row: dict[str, Any] = {"rq_noop_per_s": rq_noop(1, args.events, env, work)}
        for case, (ordered, _) in CASES.items():
            profile = None if args.profile is None or r else args.profile.with_suffix(f".{int(ordered)}.txt")
            row[case] = forwarding(args.events, ordered, env, work, profile, args.kind)
        rounds.append(row)
    bus = args.kind != "http"
    own = f"{'broker alone/s':>16}" if bus else ""
    print(f"kind = {args.kind}")
    print(f"{'case':<24}{'no-op RQ jobs/s':>18}{'forwarded/s':>14}{'from resume/s':>16}{'× no-op (rounds)':>20}")
    print(f"{'':<24}{'':>18}{'':>14}{'':>16}{'':>20}{'median':>8}{'goal':>6}{own}")
    results = {}
    for case, (_, http_goal) in CASES.items():
        goal = BUS_GOALS[case] if bus else http_goal
        ratios = [row[case]["per_s"] / row["rq_noop_per_s"] for row in rounds]
        results[case] = statistics.median(ratios)
        columns = [
            " ".join(f"{x:.0f}" for x in (row["rq_noop_per_s"] for row in rounds)),
            " ".join(f"{x:.0f}" for x in (row[case]["per_s"] for row in rounds)),
            " ".join(f"{x:.0f}" for x in (row[case]["from_resume_per_s"] for row in rounds)),
            " ".join(f"{x:.2f}" for x in ratios),
        ]
        alone = " ".join(f"{row[case]['broker_per_s']:.0f}" for row in rounds) if bus else ""
        print(
            f"{case:<24}{columns[0]:>18}{columns[1]:>14}{columns[2]:>16}{columns[3]:>20}"
            f"{results[case]:>8.2f}{goal:>6.1f}{alone:>16}"
        )
    print(
        f"{args.events} deliveries per case and round, one `webhooks worker` (PostgreSQL + Redis); timed: the"
        " forwarding only (first to last delivered_at), the events processed beforehand with the destination paused"
    )
    if args.profile:
        for ordered in (0, 1):
            print(f"--- profile, {'ordered' if ordered else 'unordered'}")
            print(summarize(args.profile.with_suffix(f".{ordered}.txt")))
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "medians": results}, indent=1, default=str))


if __name__ == "__main__":
    main()
