"""Runtime configuration (#32) on the real processes: the Procfile's on PostgreSQL + Redis (gunicorn
with two web processes, ``webhooks worker``) and ``webhooks serve``'s on SQLite (two web processes,
the worker process). Each web process is reached on purpose: a connection is pinned to the process
that accepted it (its socket found in that process's descriptors), so "accepted on every web process"
is proved, not hoped for. A change made through one process's API is in effect on every web process
within the live bound; the worker process forwards with a rotated destination secret (both signatures
during the grace, only the new one after); and no secret written through the API is found in any
later API answer, in the processes' logs, in ``pg_dump``'s output or in the raw SQLite files."""

from __future__ import annotations

import contextlib
import http.client
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from standardwebhooks.webhooks import Webhook

from tests.admin.test_runtime_config import KEYS, OTHER, SECRET, URL_TOKEN, within_a_second
from tests.conftest import ADMIN_PASSWORD, ROOT, STRIPE_SECRET, free_port, stripe_event, stripe_headers, wait_until
from tests.support import destination as local
from tests.support.processes import BIN, clean_env, event_status, gunicorn_cmd, wait_http
from tests.support.servers import postgres_bin

sys.path.insert(0, str(ROOT / "benchmarks"))
from common import accepted_by

API_KEY = "sk_live_ApiKeyOfShopEuNeverShown_77"


def children(pid: int) -> list[int]:
    return [int(p) for task in Path(f"/proc/{pid}/task").iterdir() for p in (task / "children").read_text().split()]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except FileNotFoundError:
        return ""


def on_process(port: int, pid: int, pids: list[int], send: Callable[[http.client.HTTPConnection], int]) -> int:
    """``send``'s status over a keep-alive connection that web process ``pid`` accepted."""
    for _ in range(200):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            if accepted_by(port, conn, pids) == pid:
                return send(conn)
        finally:
            conn.close()
    raise AssertionError(f"no connection reached web process {pid}")


ids = itertools.count()


def delivery(name: str, secret: str) -> Callable[[http.client.HTTPConnection], int]:
    def send(conn: http.client.HTTPConnection) -> int:
        body = stripe_event(f"evt_proc_{next(ids)}")
        conn.request("POST", f"/webhooks/{name}", body=body, headers=stripe_headers(body, secret))
        response = conn.getresponse()
        response.read()
        return response.status

    return send


class Deployment:
    def __init__(self, port: int, master: int, logs: list[Path]) -> None:
        self.port, self.master, self.logs = port, master, logs
        self.base = f"http://127.0.0.1:{port}"
        self.answers: list[str] = []  # every API answer after the ones that made a secret

    def web(self) -> list[int]:
        return [p for p in children(self.master) if "serve-worker" not in cmdline(p)]

    def everywhere(self, name: str, secret: str) -> set[int]:
        """The statuses of one delivery on each web process."""
        pids = self.web()
        return {on_process(self.port, pid, pids, delivery(name, secret)) for pid in pids}

    def api(self, method: str, path: str, body: Any = None, keep: bool = True) -> requests.Response:
        response = requests.request(
            method, f"{self.base}/admin/api{path}", json=body, auth=("admin", ADMIN_PASSWORD), timeout=30
        )
        if keep:
            self.answers.append(response.text)
        return response


def _start(cmd: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def deployment(db: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Deployment]:
    """The processes; once they are stopped, the database's raw bytes join ``answers`` (the SQLite
    files, or ``pg_dump``'s output)."""
    port = free_port()
    common = dict(
        STRIPE_WEBHOOK_SECRET=STRIPE_SECRET,  # a file-owned endpoint: `stripe`
        WEBHOOKS_ADMIN_PASSWORD=ADMIN_PASSWORD,
        WEBHOOKS_ENCRYPTION_KEYS=KEYS,
        WEB_CONCURRENCY="2",
        WEB_THREADS="4",
        WEBHOOKS_LOG_LEVEL="debug",  # the most the logs ever say
    )
    procs: list[subprocess.Popen[bytes]] = []
    logs = [tmp_path / "web.log", tmp_path / "worker.log"]
    if db == "sqlite":
        env = clean_env(**common)
        procs.append(_start([str(BIN / "webhooks"), "serve", "--port", str(port)], env, tmp_path, logs[0]))
    else:
        pg_url, redis_url = request.getfixturevalue("pg_url"), request.getfixturevalue("redis_url")
        env = clean_env(DATABASE_URL=pg_url, REDIS_URL=redis_url, **common)
        subprocess.run([str(BIN / "webhooks"), "db", "upgrade"], env=env, check=True, capture_output=True)
        procs.append(_start(gunicorn_cmd(port), env, tmp_path, logs[0]))
        procs.append(_start([str(BIN / "webhooks"), "worker"], env, tmp_path, logs[1]))
    found = Deployment(port, procs[0].pid, logs)
    try:
        wait_http(f"{found.base}/healthz")
        wait_until(lambda: len(found.web()) == 2, timeout=60)
        yield found
    finally:
        _stop(procs)
    if db == "sqlite":
        found.answers.append(b"".join(p.read_bytes() for p in tmp_path.glob("webhooks.db*")).decode("latin-1"))
    else:
        pg_dump = postgres_bin()
        assert pg_dump is not None
        libpq = request.getfixturevalue("pg_url").replace("postgresql+psycopg://", "postgresql://")
        dump = subprocess.run([str(pg_dump / "pg_dump"), libpq], capture_output=True)
        assert dump.returncode == 0 and b"config_secrets" in dump.stdout, dump.stderr
        found.answers.append(dump.stdout.decode("latin-1"))


def signatures(seen: local.Seen) -> list[str]:
    return [s for s in seen.headers["webhook-signature"].split() if s.startswith("v1,")]


def verifies(secret: str, seen: local.Seen) -> bool:
    try:
        Webhook(secret).verify(seen.body, seen.headers)
        return True
    except Exception:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_changes_reach_every_process_and_no_secret_leaks(
    db: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with local.running() as dest, deployment(db, tmp_path, request) as dep:
        # Created through the API: taken by every web process within the bound, processed by the worker.
        shop = {"name": "shop-eu", "provider": "stripe", "secrets": [SECRET], "api_key": API_KEY, "label": "merchant-7"}
        assert dep.api("POST", "/endpoints", shop, keep=False).status_code == 201
        within_a_second(lambda: dep.everywhere("shop-eu", SECRET) == {200})
        listed = dep.api("GET", "/events?endpoint=shop-eu").json()["events"]
        wait_until(lambda: event_status(dep.base, "shop-eu", listed[0]["event_id"]) == "processed", timeout=60)

        # A second secret, the first expired: refused with the old everywhere, taken with the new.
        added = dep.api("POST", "/endpoints/shop-eu/secrets", {"value": OTHER})
        assert added.status_code == 201
        [shown] = dep.api("GET", "/endpoints?label=merchant-7").json()["endpoints"]
        [first] = [s for s in shown["secrets"] if s["purpose"] == "signing" and s["id"] != added.json()["id"]]
        assert dep.api("POST", f"/endpoints/shop-eu/secrets/{first['id']}/expire", {}).status_code == 200
        within_a_second(lambda: dep.everywhere("shop-eu", SECRET) == {400})
        assert dep.everywhere("shop-eu", OTHER) == {200}

        # The worker process forwards with a rotated destination secret.
        url = f"{dest.url}?token={URL_TOKEN}"
        orders = {"name": "orders", "url": url, "secrets": [dest.secret], "allow_private": True}
        assert dep.api("POST", "/destinations", orders, keep=False).status_code == 201
        # (the process answering may not hold the new destination yet: the patch is refused until it does)
        within_a_second(lambda: dep.api("PATCH", "/endpoints/shop-eu", {"forward": ["orders"]}).status_code == 200)

        def forwarded(wanted: Callable[[local.Seen], bool]) -> bool:
            """Deliver once more to each web process; whether the latest request forwarded is ``wanted``.
            (The worker process forwards the events it processes once it holds a change, so
            deliveries go on until one shows it.)"""
            dep.everywhere("shop-eu", OTHER)
            return bool(dest.seen) and wanted(dest.seen[-1])

        wait_until(lambda: forwarded(lambda seen: True), timeout=60, interval=0.5)
        assert verifies(dest.secret, dest.seen[-1]) and len(signatures(dest.seen[-1])) == 1
        rotated = dep.api("POST", "/destinations/orders/rotate", {"grace_seconds": 600}, keep=False).json()
        wait_until(lambda: forwarded(lambda seen: len(signatures(seen)) == 2), timeout=60, interval=0.5)
        during = dest.seen[-1]  # sent once the rotation reached the worker: both sign it
        assert verifies(dest.secret, during) and verifies(rotated["value"], during)
        final = dep.api("POST", "/destinations/orders/rotate", {"grace_seconds": 0}, keep=False).json()

        def only_newest(seen: local.Seen) -> bool:
            return len(signatures(seen)) == 1 and verifies(final["value"], seen)

        wait_until(lambda: forwarded(only_newest), timeout=60, interval=0.5)
        assert not verifies(dest.secret, dest.seen[-1]) and not verifies(rotated["value"], dest.seen[-1])
        assert dest.seen[-1].verified is False  # the test destination's own oracle holds the first secret

        # The file's endpoint is its own; a deleted one is 404 everywhere and its events stay.
        refused = dep.api("PATCH", "/endpoints/stripe", {"label": "x"})
        assert refused.status_code == 409 and refused.json()["error"] == "managed_by_file"
        assert dep.api("DELETE", "/endpoints/shop-eu").status_code == 204
        within_a_second(lambda: dep.everywhere("shop-eu", OTHER) == {404})
        kept = {e["event_id"] for e in dep.api("GET", "/events?endpoint=shop-eu").json()["events"]}
        assert listed[0]["event_id"] in kept
        changes = dep.api("GET", "/audit?limit=100").json()["changes"]
        assert {c["who"] for c in changes} == {"admin"} and len(changes) >= 8
        dep.answers += [dep.api("GET", path).text for path in ("/endpoints", "/destinations", "/audit")]
        dep.answers.append(requests.get(f"{dep.base}/metrics", auth=("admin", ADMIN_PASSWORD), timeout=30).text)
    dep.answers += [log.read_bytes().decode("latin-1") for log in dep.logs if log.exists()]
    known = [SECRET, OTHER, API_KEY, URL_TOKEN, dest.secret, rotated["value"], final["value"]]
    found = {k for k in known for text in dep.answers if k in text}
    assert not found, found
    assert all(log.stat().st_size for log in dep.logs[: 2 if db == "postgres" else 1])  # the logs were read
