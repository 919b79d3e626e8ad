"""Receiver throughput against a baseline measured in the same run.

    .venv/bin/python benchmarks/receive.py [--seconds 10] [--connections 32]

Starts gunicorn (same config as the Procfile's web process) twice: once serving a bare Flask app
that answers 200 (the baseline: HTTP + WSGI + Flask), once serving the real receiver on a fresh
PostgreSQL database and Redis. wrk (Debian package ``wrk``; installed with apt when missing) posts
pre-signed Stripe events: all distinct (new rows: verify + insert + commit + enqueue), then
already stored ones again (duplicates: verify + an insert that finds the row). Prints requests/s
and the ratio to the baseline. Needs PostgreSQL and Redis (TEST_DATABASE_URL, TEST_REDIS_URL).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis
import sqlalchemy as sa
import stripe

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PG = os.environ.get("TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/12")
SECRET = "whsec_bench"
BASELINE_APP = '''
from flask import Flask
app = Flask(__name__)
@app.post("/webhooks/<name>")
def ok(name):
    return {"received": True}
'''


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def signed_events(count: int) -> list[str]:
    """Lua table entries {signature header, body} for ``count`` distinct signed Stripe deliveries."""
    t = int(time.time())
    entries = []
    for i in range(count):
        body = json.dumps({"id": f"evt_bench_{uuid.uuid4().hex}", "object": "event", "created": t + i,
                           "type": "payment_intent.succeeded",
                           "data": {"object": {"id": f"pi_bench_{i % 500}", "object": "payment_intent"}}})
        header = stripe.WebhookSignature.generate_signature_header(body, SECRET, timestamp=t)
        entries.append(f"{{{json.dumps(header)}, {json.dumps(body)}}}")
    return entries


def lua_script(path: Path, entries: list[str]) -> None:
    """A wrk script cycling through ``entries``; each wrk thread (its own Lua state) takes every
    other one, so within a cycle no delivery repeats."""
    path.write_text(
        "local reqs = {\n" + ",\n".join(entries) + "\n}\n"
        "local threads = 0\n"
        "function setup(thread) thread:set('tid', threads); threads = threads + 1 end\n"
        "function init(args) i = tid end\n"
        f"request = function()\n  i = (i + 2) % {len(entries)}\n"
        "  return wrk.format('POST', '/webhooks/stripe', {['Stripe-Signature']=reqs[i + 1][1],"
        " ['Content-Type']='application/json'}, reqs[i + 1][2])\nend\n"
    )


def wrk(url: str, script: Path, seconds: int, connections: int) -> tuple[float, str]:
    out = subprocess.run(["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", str(script), url],
                         capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rate, f"{errors.group(1)} non-2xx" if errors else "all 2xx"


def gunicorn(app: str, env: dict[str, str], port: int, cwd: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([str(BIN / "gunicorn"), app, "-c", "python:webhooks.gunicorn_conf", "--bind",
                             f"127.0.0.1:{port}", "--access-logfile", "/dev/null"], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            import urllib.request
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
        except Exception as exc:  # 404 means up
            if "404" in str(exc) or "405" in str(exc):
                return proc
        time.sleep(0.1)
    raise RuntimeError("gunicorn did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True)
    work = Path(tempfile.mkdtemp())
    (work / "baseline_app.py").write_text(BASELINE_APP)
    script, duplicates = work / "new.lua", work / "duplicates.lua"
    entries = signed_events(60_000)  # enough that a run never repeats one: every request is new
    lua_script(script, entries)
    lua_script(duplicates, entries[:1000])  # sent in the first second of the new-events run
    env = {"WEB_CONCURRENCY": "2", "WEB_THREADS": "4", **os.environ, "PYTHONPATH": f"{ROOT}:{work}"}

    port = free_port()
    proc = gunicorn("baseline_app:app", env, port, work)
    try:
        baseline, b_status = wrk(f"http://127.0.0.1:{port}/webhooks/stripe", script, args.seconds, args.connections)
    finally:
        proc.terminate()
        proc.wait()

    admin = sa.create_engine(PG, isolation_level="AUTOCOMMIT")
    name = f"wh_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    redis.Redis.from_url(REDIS).flushdb()
    env |= {"DATABASE_URL": url, "REDIS_URL": REDIS, "STRIPE_WEBHOOK_SECRET": SECRET}
    subprocess.run([str(BIN / "webhooks"), "db", "upgrade"], env=env, check=True, capture_output=True)
    port = free_port()
    proc = gunicorn("webhooks:create_app()", env, port, ROOT)
    try:
        new, n_status = wrk(f"http://127.0.0.1:{port}/webhooks/stripe", script, args.seconds, args.connections)
        dup, d_status = wrk(f"http://127.0.0.1:{port}/webhooks/stripe", duplicates, args.seconds, args.connections)
    finally:
        proc.terminate()
        proc.wait()
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            stored = conn.execute(sa.text("SELECT count(*) FROM events")).scalar_one()
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        redis.Redis.from_url(REDIS).flushdb()
    print(f"{'case':<40}{'req/s':>10}{'× baseline':>12}  responses")
    print(f"{'baseline (bare gunicorn + Flask)':<40}{baseline:>10.0f}{1:>12.2f}  {b_status}")
    print(f"{'new events (PostgreSQL + Redis)':<40}{new:>10.0f}{new / baseline:>12.2f}  {n_status}")
    print(f"{'duplicate deliveries':<40}{dup:>10.0f}{dup / baseline:>12.2f}  {d_status}")
    print(f"rows stored: {stored} (= new-event requests; duplicates add none)")
    print(f"gunicorn {env['WEB_CONCURRENCY']} workers × {env['WEB_THREADS']} threads (WEB_CONCURRENCY, WEB_THREADS), "
          f"wrk {args.connections} connections, {os.cpu_count()} cores shared by all")


if __name__ == "__main__":
    main()
