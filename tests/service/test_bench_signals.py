"""A benchmark stopped by SIGTERM (``timeout``) or Ctrl-C stops every server it started and drops its
scratch database; killed outright (SIGKILL), its servers still die with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import ROOT, wait_until

# What benchmarks/ingest.py does before its first wrk run: a scratch database, then two gunicorn
# masters (the baseline and the receiver) in their own sessions; then it waits (a run in progress).
SCRIPT = """
import sys, time
sys.path.insert(0, {benchmarks!r})
from common import REDIS, base_env, free_port, gunicorn, scratch_database, workdir

work = workdir()
with scratch_database() as db:
    env = base_env(work, DATABASE_URL=db, REDIS_URL=REDIS)
    with gunicorn("baseline_app:app", env, free_port(), work), gunicorn("webhooks:create_app()", env, free_port()):
        print("running", flush=True)
        time.sleep(600)
"""


def bench_databases(admin_url: str) -> list[str]:
    engine = sa.create_engine(admin_url)
    try:
        with engine.connect() as conn:
            found = conn.execute(sa.text("SELECT datname FROM pg_database WHERE datname LIKE 'wh\\_bench\\_%'"))
            return [row[0] for row in found]
    finally:
        engine.dispose()


def descendants(pid: int) -> set[int]:
    """Every process started under ``pid``, by the parent links in /proc (gunicorn masters and workers)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["sigterm", "ctrl-c", "sigkill"])
def test_a_stopped_benchmark_leaves_no_server_and_no_database(
    sig: signal.Signals, pg_admin_url: str, redis_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "bench.py"
    script.write_text(SCRIPT.format(benchmarks=str(ROOT / "benchmarks")))
    env = {**os.environ, "TEST_DATABASE_URL": pg_admin_url, "BENCH_REDIS_URL": redis_url, "TMPDIR": str(tmp_path)}
    log = tmp_path / "bench.log"
    before = set(bench_databases(pg_admin_url))
    with log.open("wb") as out:
        bench = subprocess.Popen([sys.executable, str(script)], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "running" in log.read_text() or bench.poll() is not None, timeout=120)
        assert bench.poll() is None, log.read_text()
        servers = descendants(bench.pid)
        assert len(servers) >= 4, servers  # two gunicorn masters, each with its workers
        made = set(bench_databases(pg_admin_url)) - before
        assert len(made) == 1
        bench.send_signal(sig)
        bench.wait(timeout=120)
        wait_until(lambda: not [pid for pid in servers if alive(pid)], timeout=60)
        if sig != signal.SIGKILL:  # a killed process runs no code: only its servers can be made to follow
            assert set(bench_databases(pg_admin_url)) - before == set(), log.read_text()
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        drop_databases(pg_admin_url, set(bench_databases(pg_admin_url)) - before)  # what SIGKILL leaves


def drop_databases(admin_url: str, names: set[str]) -> None:
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        for name in names:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()
