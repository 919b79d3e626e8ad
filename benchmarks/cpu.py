"""CPU per delivery through the WSGI app, with no server and no load: the receiver against the bare
Flask view, in this one thread (``time.thread_time``, so other work on the machine barely moves it).

    .venv/bin/python benchmarks/cpu.py [--requests 2000] [--sqlite] [--profile new|dup|process]

Runs first deliveries, then the same deliveries again (duplicates), one at a time: a group-commit
batch of one, the receiver's worst case; then processes the stored events in this thread (the
job's own CPU, without RQ's: a no-op handler and the object-state upsert). PostgreSQL + Redis
(fresh database, ``BENCH_REDIS_URL``), or with ``--sqlite`` the embedded default (a SQLite file,
the in-process queue; no worker runs).
``--profile`` prints cProfile's top functions (CPU time) for that case.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from common import REDIS, SECRET, scratch_database, signed_events, workdir  # the script's folder is on sys.path
from flask import Flask

from webhooks import create_app
from webhooks.revisions import upgrade

BASELINE = Flask("baseline")


@BASELINE.post("/webhooks/<name>")
def ok(name: str) -> dict[str, bool]:
    return {"received": True}


def environ(header: str, body: bytes) -> dict[str, Any]:
    """What gunicorn hands the app for a Stripe delivery."""
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/webhooks/stripe",
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "RAW_URI": "/webhooks/stripe",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
        "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_STRIPE_SIGNATURE": header,
        "HTTP_USER_AGENT": "Stripe/1.0",
    }


def per_request(app: Any, deliveries: list[tuple[str, str]], profile: cProfile.Profile | None = None) -> float:
    """µs of this thread's CPU per request; every answer must be a 200."""
    started = time.thread_time()
    if profile:
        profile.enable()
    statuses: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc: Any = None) -> None:
        statuses.append(status)

    for header, body in deliveries:
        b"".join(app(environ(header, body.encode()), start_response))
    assert len(statuses) == len(deliveries) and all(s.startswith("200") for s in statuses), set(statuses)
    if profile:
        profile.disable()
    return (time.thread_time() - started) / len(deliveries) * 1e6


def per_event(app: Flask, deliveries: list[tuple[str, str]], profile: cProfile.Profile | None = None) -> float:
    """µs of this thread's CPU per event processed (each must end ``processed``)."""
    from webhooks.jobs.process import process_event

    ids = [json.loads(body)["id"] for _, body in deliveries]
    with app.extensions["webhooks"].scope():
        started = time.thread_time()
        if profile:
            profile.enable()
        outcomes = {process_event("stripe", event_id) for event_id in ids}
        if profile:
            profile.disable()
    assert outcomes == {"processed"}, outcomes
    return (time.thread_time() - started) / len(ids) * 1e6


@contextlib.contextmanager
def receiver(sqlite: bool) -> Iterator[Flask]:
    if sqlite:
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{folder}/webhooks.db"
            upgrade(url)
            yield create_app(
                {
                    "DATABASE_URL": url,
                    "STRIPE_WEBHOOK_SECRET": SECRET,
                    "WEBHOOKS_EMBEDDED_WORKER": "false",
                    "WEBHOOKS_HANDLERS": "bench_handlers",
                }
            )
        return
    with scratch_database() as db:
        yield create_app(
            {
                "DATABASE_URL": db,
                "REDIS_URL": REDIS,
                "STRIPE_WEBHOOK_SECRET": SECRET,
                "WEBHOOKS_HANDLERS": "bench_handlers",
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--sqlite", action="store_true", help="the embedded default instead of PostgreSQL + Redis")
    parser.add_argument("--profile", choices=["new", "dup", "process"])
    args = parser.parse_args()
    sys.path.insert(0, str(workdir()))  # its bench_handlers: a no-op handler
    with receiver(args.sqlite) as app:
        warm, deliveries = signed_events(200, "warm"), signed_events(args.requests, "cpu")
        per_request(BASELINE, warm), per_request(app, warm)
        profile = cProfile.Profile(time.thread_time) if args.profile else None
        base = per_request(BASELINE, deliveries)
        new = per_request(app, deliveries, profile if args.profile == "new" else None)
        dup = per_request(app, deliveries, profile if args.profile == "dup" else None)
        processing = per_event(app, deliveries, profile if args.profile == "process" else None)
    print(f"{'case':<34}{'CPU µs/request':>15}{'rate × base':>12}")
    for case, value in (
        ("baseline: bare Flask view", base),
        ("receiver: first deliveries", new),
        ("receiver: duplicates", dup),
    ):
        print(f"{case:<34}{value:>15.0f}{base / value:>12.2f}")
    print(f"{'processing: process_event':<34}{processing:>15.0f}  (CPU µs per event, RQ's own work not included)")
    print(
        f"{'PostgreSQL + Redis' if not args.sqlite else 'SQLite + embedded queue'}, "
        f"{args.requests} requests each, one at a time (the profiler, when on, inflates its case)"
    )
    if profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
