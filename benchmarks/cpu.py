"""CPU per delivery through the WSGI app, with no server and no load: the receiver against the bare
Flask view, in this one thread (``time.thread_time``, so other work on the machine barely moves it).

    .venv/bin/python benchmarks/cpu.py [--requests 2000] [--sqlite | --serve] [--profile new|dup|process]
    .venv/bin/python benchmarks/cpu.py --kinds [--requests 300] [--sqlite]

Runs first deliveries, then the same deliveries again (duplicates), one at a time: a group-commit
batch of one, the receiver's worst case; then processes the stored events in this thread (the
job's own CPU, without RQ's: a no-op handler and the object-state upsert). PostgreSQL + Redis
(fresh database, ``BENCH_REDIS_URL``), or with ``--sqlite`` the embedded default (a SQLite file,
the in-process queue; no worker runs); ``--serve`` is a web process of ``webhooks serve`` (SQLite,
and nothing queued: its worker process takes the rows from the database, ``webhooks.worker.handover``).
``--profile`` prints cProfile's top functions (CPU time) for that case.

``--kinds``: CPU per genuine delivery for every registered kind, each signed as its provider would
(``tests/support/catalogue.py``'s endpoints and signer), each verified in full (the signature is
checked before the database is asked): duplicates of one stored event, or new events where the
kind's signer mints an id per delivery; against the bare view.
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

from common import REDIS, ROOT, SECRET, scratch_database, signed_events, workdir  # the script's folder is on sys.path
from flask import Flask

from webhooks import create_app
from webhooks.tables.revisions import upgrade

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


def wsgi(path: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """The environ gunicorn hands the app for any kind's delivery."""
    base = environ("", body)
    for name in ("HTTP_STRIPE_SIGNATURE", "CONTENT_TYPE"):
        del base[name]
    route, _, query = path.partition("?")
    base |= {"PATH_INFO": route, "RAW_URI": path, "QUERY_STRING": query, "HTTP_HOST": "hooks.example.com"}
    for name, value in headers.items():
        key = name.upper().replace("-", "_")
        base["CONTENT_TYPE" if key == "CONTENT_TYPE" else f"HTTP_{key}"] = value
    return base


def per_kind(app: Any, requests: list[tuple[str, dict[str, str], bytes]]) -> float:
    """µs of this thread's CPU per request; every answer must be a 2xx."""
    statuses: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc: Any = None) -> None:
        statuses.append(status)

    started = time.thread_time()
    for path, headers, body in requests:
        b"".join(app(wsgi(path, headers, body), start_response))
    assert all(s.startswith("2") for s in statuses), set(statuses)
    return (time.thread_time() - started) / len(requests) * 1e6


def kinds(sqlite: bool, count: int) -> None:
    """CPU per genuine delivery for every registered kind, beside the bare view's."""
    sys.path.insert(0, str(ROOT))  # tests.support.catalogue: each kind's endpoint and signer
    from tests.support.catalogue import all_endpoints, genuine
    from webhooks.providers import PROVIDERS

    with receiver(sqlite, all_endpoints()) as app:
        names = [n for n, e in app.extensions["webhooks"].settings.endpoints.items() if e.kind == n]
        signed = {}
        for name in names:
            signed[name] = [(path, headers, body) for body, headers, path in (genuine(app, name) for _ in range(count))]
        stripe = signed["stripe"][0]
        baseline = [(stripe[0], stripe[1], stripe[2])] * count
        per_kind(BASELINE, baseline), per_kind(app, signed["stripe"][:50])  # warm up
        base = per_kind(BASELINE, baseline)
        print(f"{'kind':<14}{'CPU µs/delivery':>16}{'× bare view':>13}")
        print(f"{'(bare view)':<14}{base:>16.0f}{1:>13.2f}")
        for name in sorted(names):
            value = per_kind(app, signed[name])
            print(f"{name:<14}{value:>16.0f}{base / value:>13.2f}")
    missing = sorted(set(PROVIDERS) - set(names))
    assert not missing, f"kinds without a catalogue endpoint: {missing}"
    print(
        f"{'PostgreSQL + Redis' if not sqlite else 'SQLite + embedded queue'}, {count} deliveries a kind, one at a"
        " time, each verified in full: duplicates of one stored event, or new events where the kind's signer"
        " mints an id per delivery (GitHub's X-GitHub-Delivery, a replay key per signature)"
    )


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
def receiver(sqlite: bool, endpoints: dict[str, Any] | None = None, serve: bool = False) -> Iterator[Flask]:
    config: dict[str, Any] = {"WEBHOOKS_HANDLERS": "bench_handlers"}
    config |= {"ENDPOINTS": endpoints} if endpoints else {"STRIPE_WEBHOOK_SECRET": SECRET}
    if sqlite:
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{folder}/webhooks.db"
            upgrade(url)
            app = create_app({"DATABASE_URL": url, "WEBHOOKS_EMBEDDED_WORKER": "false", **config})
            if serve:
                app.extensions["webhooks"].queue.hand_over()
            yield app
        return
    with scratch_database() as db:
        yield create_app({"DATABASE_URL": db, "REDIS_URL": REDIS, **config})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--sqlite", action="store_true", help="the embedded default instead of PostgreSQL + Redis")
    parser.add_argument("--serve", action="store_true", help="a web process of `webhooks serve` (SQLite, handed over)")
    parser.add_argument("--profile", choices=["new", "dup", "process"])
    parser.add_argument("--kinds", action="store_true", help="CPU per genuine delivery for every registered kind")
    args = parser.parse_args()
    args.sqlite = args.sqlite or args.serve
    sys.path.insert(0, str(workdir()))  # its bench_handlers: a no-op handler
    if args.kinds:
        kinds(args.sqlite, min(args.requests, 300))
        return
    with receiver(args.sqlite, serve=args.serve) as app:
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
        f"{'PostgreSQL + Redis' if not args.sqlite else 'SQLite + embedded queue'}"
        f"{' (a web process of webhooks serve: nothing queued)' if args.serve else ''}, {args.requests} requests"
        " each, one at a time (the profiler, when on, inflates its case)"
    )
    if profile:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
