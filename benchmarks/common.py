"""What every benchmark shares: services, signed Stripe deliveries, wrk runs, gunicorn servers.

Load always comes from a separate process (wrk) on 127.0.0.1 and stops by itself (``-d``).
wrk is the Debian package ``wrk`` (installed with apt when missing). Results are ratios against
a baseline measured in the same run: the machine's absolute speed varies from run to run.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
import sqlalchemy as sa
import stripe

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PG = os.environ.get("TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")  # flushed: never the tests' database
SECRET = "whsec_bench"
BASELINE_APP = """
from flask import Flask
app = Flask(__name__)
@app.post("/webhooks/<name>")
def ok(name):
    return {"received": True}
"""
NOOP_HANDLERS = """
from webhooks import on

@on("stripe", "payment_intent.succeeded")
def noop(event, state=None):
    return None


def noop_job(*args):
    return None
"""
# wrk's Lua: every thread (its own Lua state) takes every `threads`-th entry, so within a cycle no
# delivery repeats; `done` writes the counts and latency percentiles as JSON to stderr.
LUA_TAIL = """
local threads = 0
local all = {}
function setup(thread) thread:set('tid', threads); threads = threads + 1; table.insert(all, thread) end
function init(args) i = tid; nthreads = tonumber(args[1]) or 2 end
request = function()
  local r = pick()
  return wrk.format('POST', nil, {['Stripe-Signature']=r[1], ['Content-Type']='application/json'}, r[2])
end
function done(summary, latency, requests)
  io.stderr:write(string.format('{"requests": %d, "duration_us": %d, "non2xx": %d, "errors": %d, '
    .. '"p50_us": %d, "p99_us": %d, "max_us": %d}\\n', summary.requests, summary.duration,
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.timeout, latency:percentile(50), latency:percentile(99), latency.max))
end
"""


def _stop_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM (``timeout``, ``kill``) unwinds like Ctrl-C: every ``finally`` and context manager runs,
    so servers are stopped and the scratch database dropped. A second signal is ignored: it would cut
    that cleanup short."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise SystemExit(128 + signum)


if threading.current_thread() is threading.main_thread():  # imported by a benchmark script: its main thread
    signal.signal(signal.SIGTERM, _stop_on_sigterm)


def _dies_with_parent() -> None:
    """A child's ``preexec_fn``: the kernel SIGTERMs it when the benchmark dies, even by SIGKILL (a
    child in its own session is out of reach of the terminal's and ``timeout``'s group signals)."""
    _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the forked child only calls it


def ensure_tools() -> None:
    """wrk from apt, py-spy from pip: both only when missing."""
    if not shutil.which("wrk"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True)
    if not (BIN / "py-spy").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def signed(event_id: str, t: int, n: int) -> tuple[str, str]:
    body = json.dumps(
        {
            "id": event_id,
            "object": "event",
            "created": t + n,
            "type": "payment_intent.succeeded",
            "data": {"object": {"id": f"pi_bench_{n % 500}", "object": "payment_intent"}},
        }
    )
    return stripe.WebhookSignature.generate_signature_header(body, SECRET, timestamp=t), body


def signed_events(count: int, tag: str = "") -> list[tuple[str, str]]:
    """``count`` distinct signed Stripe deliveries as (signature header, body)."""
    t = int(time.time())
    prefix = f"evt_bench_{tag}{uuid.uuid4().hex[:12]}_"
    return [signed(f"{prefix}{i}", t, i) for i in range(count)]


def _lua_list(name: str, entries: list[tuple[str, str]]) -> str:
    rows = ",\n".join(f"{{{json.dumps(h)}, {json.dumps(b)}}}" for h, b in entries)
    return f"local {name} = {{\n{rows}\n}}\n"


def lua_script(
    path: Path, new: list[tuple[str, str]], duplicates: list[tuple[str, str]] | None = None, new_every: int = 1
) -> Path:
    """A wrk script: ``new`` entries in turn; with ``duplicates``, one new in every ``new_every``
    requests and stored ones in between (the mixed storm: new_every=3 → 1 new : 2 duplicates)."""
    dup = duplicates or []
    path.write_text(
        _lua_list("new", new)
        + _lua_list("dup", dup)
        + "local n = 0\n"
        + "function pick()\n  n = n + 1\n"
        + (f"  if #dup > 0 and n % {new_every} ~= 0 then return dup[((n + tid) % #dup) + 1] end\n" if dup else "")
        + "  i = i + nthreads\n  return new[((i - nthreads) % #new) + 1]\nend\n"
        + LUA_TAIL
    )
    return path


def wrk(url: str, script: Path, seconds: int, connections: int, threads: int = 2) -> dict[str, Any]:
    """One wrk run; requests/s, p50/p99 in ms, and how many answers were not 2xx."""
    done = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{seconds}s",
            "--timeout",
            "10s",
            "-s",
            str(script),
            url,
            "--",
            str(threads),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    raw = json.loads(done.stderr.strip().splitlines()[-1])
    return {
        "connections": connections,
        "rps": raw["requests"] / (raw["duration_us"] / 1e6),
        "p50_ms": raw["p50_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "max_ms": raw["max_us"] / 1000,
        "requests": raw["requests"],
        "non2xx": raw["non2xx"],
        "socket_errors": raw["errors"],
    }


def wait_http(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # any answer: it is up
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


@contextlib.contextmanager
def process(
    cmd: list[str], env: dict[str, str], cwd: Path = ROOT, up: str | None = None, log: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A child process in its own session, stopped (SIGTERM, then SIGKILL) by its id on exit, and by
    the kernel if the benchmark dies first."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=cwd,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_dies_with_parent,
    )
    try:
        if up:
            wait_http(up)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]


def gunicorn(
    app: str, env: dict[str, str], port: int, cwd: Path = ROOT, log: Path | None = None
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """gunicorn with the Procfile's config (``webhooks.service.gunicorn_conf``, no access log) on 127.0.0.1:port."""
    cmd = [
        str(BIN / "gunicorn"),
        app,
        "-c",
        "python:webhooks.gunicorn_conf",
        "--bind",
        f"127.0.0.1:{port}",
        "--no-control-socket",
    ]
    return process(cmd, env, cwd, up=f"http://127.0.0.1:{port}/", log=log)


@contextlib.contextmanager
def scratch_database() -> Iterator[str]:
    """A fresh PostgreSQL database at the head revision (dropped after) and a flushed Redis db."""
    admin = sa.create_engine(PG, isolation_level="AUTOCOMMIT")
    name = f"wh_bench_{uuid.uuid4().hex[:8]}"
    try:  # from the CREATE on: a signal at any point still drops it
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        url = admin.url.set(database=name).render_as_string(hide_password=False)
        redis.Redis.from_url(REDIS).flushdb(asynchronous=True)  # a long run leaves millions of jobs
        subprocess.run(
            [str(BIN / "webhooks"), "db", "upgrade"],
            env={**os.environ, "DATABASE_URL": url},
            check=True,
            capture_output=True,
        )
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
        redis.Redis.from_url(REDIS).flushdb(asynchronous=True)  # a long run leaves millions of jobs


def scalar(url: str, sql: str) -> Any:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql)).scalar_one()
    finally:
        engine.dispose()


def workdir() -> Path:
    work = Path(tempfile.mkdtemp(prefix="wh-bench-"))
    (work / "baseline_app.py").write_text(BASELINE_APP)
    (work / "bench_handlers.py").write_text(NOOP_HANDLERS)
    return work


def base_env(work: Path, **extra: str) -> dict[str, str]:
    env = {
        "WEB_CONCURRENCY": "2",
        "WEB_THREADS": "4",
        **os.environ,
        "PYTHONPATH": f"{ROOT}:{work}",
        "WEBHOOKS_LOG_LEVEL": "WARNING",
        "STRIPE_WEBHOOK_SECRET": SECRET,
    }
    env.update(extra)
    return env


def prime(url: str, entries: list[tuple[str, str]], connections: int = 16) -> None:
    """Deliver ``entries`` once (so later runs find them stored), from a thread pool."""
    from concurrent.futures import ThreadPoolExecutor

    def post(entry: tuple[str, str]) -> int:
        req = urllib.request.Request(
            url,
            data=entry[1].encode(),
            method="POST",
            headers={"Stripe-Signature": entry[0], "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status)

    with ThreadPoolExecutor(connections) as pool:
        statuses = list(pool.map(post, entries))
    assert all(s == 200 for s in statuses), "priming deliveries failed"


def table(rows: list[dict[str, Any]]) -> str:
    """A short table: req/s, p50, p99 and their ratios to the baseline row that precedes each case
    (the baseline measured beside it); a case's ``ratios`` (each round's) are shown in brackets."""
    head = f"{'case':<38}{'conns':>6}{'req/s':>9}{'× base':>8}{'p50 ms':>8}{'p99 ms':>8}{'p99 × base':>11}  answers"
    lines, base = [head], rows[0]
    for r in rows:
        if r["case"].startswith("baseline"):
            base = r
        answers = (
            "all 2xx"
            if not r["non2xx"] and not r["socket_errors"]
            else f"{r['non2xx']} non-2xx, {r['socket_errors']} socket errors"
        )
        spread = f"  {r['ratios']}" if "ratios" in r else ""
        lines.append(
            f"{r['case']:<38}{r['connections']:>6}{r['rps']:>9.0f}{r['rps'] / base['rps']:>8.2f}"
            f"{r['p50_ms']:>8.1f}{r['p99_ms']:>8.1f}{r['p99_ms'] / base['p99_ms']:>11.2f}  {answers}{spread}"
        )
    return "\n".join(lines)


# ----- a keep-alive connection pinned to one web process ----------------------------------------
def _socket_inode(server_port: int, client_port: int) -> str | None:
    """The inode of the server side of the loopback connection from ``client_port``."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, inode = fields[1], fields[2], fields[9]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
            return inode
    return None


def accepted_by(server_port: int, conn: http.client.HTTPConnection, pids: list[int]) -> int | None:
    """Which of ``pids`` holds the accepted end of ``conn`` (after a request it answered): a
    keep-alive connection pinned to one gunicorn web process (config_churn.py's pollers, and
    tests/service/test_runtime_config_processes.py reaching each web process on purpose)."""
    assert conn.sock is not None
    inode = _socket_inode(server_port, conn.sock.getsockname()[1])
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, PermissionError):
            if any(os.readlink(fd) == f"socket:[{inode}]" for fd in Path(f"/proc/{pid}/fd").iterdir()):
                return pid
    return None
