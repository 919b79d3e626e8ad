"""Memory and storage of one large multi-event delivery: a genuine SendGrid batch of about 768 KB
(the most SendGrid sends), through the WSGI app, on PostgreSQL + Redis and on the embedded default.

    .venv/bin/python benchmarks/big_batch.py [--sqlite-only]

Each case runs in a fresh child process: it warms the app with a small batch, reads its resident
memory, posts the big batch, then the same batch again (a replayed capture), and reports the peak
resident memory's growth (``ru_maxrss``) as a multiple of the body, the CPU of each delivery, and
the bytes stored for the events (payloads + ``bodies``) as a multiple of the body. Cases: realistic
events (~160 bytes each, ~4 800 of them) and tiny ones (~40 bytes, ~19 000: the most events a
768 KB body can carry), the shape that used to exceed PostgreSQL's 65 535 bind parameters.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

from common import REDIS, scratch_database  # the script's folder is on sys.path

LIMIT = 768 * 1024


def batch(tiny: bool) -> bytes:
    """About 768 KB of SendGrid events: realistic ones, or the smallest a sender could send."""
    events: list[dict[str, Any]] = []
    size = 2
    while True:
        i = len(events)
        event = (
            {"sg_event_id": f"{i:x}", "event": "open"}
            if tiny
            else {
                "email": f"user{i}@example.com",
                "timestamp": 1700000000 + i,
                "event": "delivered",
                "sg_event_id": f"sg_{i:06d}",
                "sg_message_id": f"msg{i // 10}.filter0001",
            }
        )
        grown = size + len(json.dumps(event)) + 2
        if grown > LIMIT - 2:
            return json.dumps(events).encode() + b"\r\n"
        events.append(event)
        size = grown


def child(database_url: str, tiny: bool) -> dict[str, Any]:
    """One case, in this (fresh) process."""
    import sqlalchemy as sa
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from webhooks import create_app, providers
    from webhooks.tables.revisions import upgrade

    key = ec.generate_private_key(ec.SECP256R1())
    public = base64.b64encode(
        key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    ).decode()
    private = base64.b64encode(
        key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    ).decode()
    config: dict[str, Any] = {
        "DATABASE_URL": database_url,
        "WEBHOOKS_EMBEDDED_WORKER": "false",
        "ENDPOINTS": {"sendgrid": {"provider": "sendgrid", "secrets": [public], "signing_key": private}},
    }
    if not database_url.startswith("sqlite"):
        config["REDIS_URL"] = REDIS
    upgrade(database_url)
    app = create_app(config)
    endpoint = app.extensions["webhooks"].settings.endpoints["sendgrid"]
    client = app.test_client()

    def post(body: bytes) -> tuple[int, float]:
        signed, headers = providers.get("sendgrid").sign(endpoint, body, now=time.time())
        started = time.process_time()
        status = client.post("/webhooks/sendgrid", data=signed, headers=headers).status_code
        return status, time.process_time() - started

    post(json.dumps([{"sg_event_id": "warm", "event": "open"}]).encode() + b"\r\n")
    body = batch(tiny)
    events = len(json.loads(body))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    first, first_cpu = post(body)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    again, again_cpu = post(body)
    engine = sa.create_engine(database_url)
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM events")).one()
        kept = conn.execute(sa.text("SELECT COALESCE(SUM(LENGTH(body)), 0) FROM bodies")).scalar_one()
    engine.dispose()
    return {
        "events": events,
        "body_kb": round(len(body) / 1024),
        "status": [first, again],
        "rows": stored[0] - 1,
        "rss_growth_x_body": round((rss_after - rss_before) / len(body), 1),
        "stored_x_body": round((int(stored[1]) + int(kept)) / len(body), 2),
        "cpu_first_ms": round(first_cpu * 1000),
        "cpu_replayed_ms": round(again_cpu * 1000),
    }


def run_case(database_url: str, tiny: bool) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", database_url, "--tiny" if tiny else "--real"],
        check=True,
        capture_output=True,
        text=True,
        env=os.environ,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sqlite-only", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--real", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.tiny)))
        return
    results = []
    for tiny in (False, True):
        with tempfile.TemporaryDirectory(prefix="wh-bench-") as tmp:
            results.append(
                {
                    "database": "sqlite",
                    "shape": "tiny" if tiny else "realistic",
                    **run_case(f"sqlite:///{tmp}/webhooks.db", tiny),
                }
            )
        if not args.sqlite_only:
            with scratch_database() as url:
                results.append(
                    {"database": "postgresql", "shape": "tiny" if tiny else "realistic", **run_case(url, tiny)}
                )
    for row in results:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
