"""A rolling restart under load, short (the restarts issue, #38): ``benchmarks/rollout.py`` for
20 s with 3 rounds, on the Procfile's processes (two gunicorn ``web``, two ``webhooks worker``, on
the suite's PostgreSQL and Redis) and on ``webhooks serve``, each restarted with SIGTERM while
signed Stripe and Adyen deliveries arrive: nothing acknowledged is lost, no effect runs twice,
every event is processed, the Procfile's processes answer no 5xx, and each process stops within
the window. The full run and its figures are in benchmarks/README.md."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.templates import migrated
from webhooks.worker.claims import MAX_LEASE

pytestmark = pytest.mark.slow
sys.path.insert(0, str(ROOT / "benchmarks"))

import rollout  # noqa: E402  (the benchmark's own code, from its folder)


def args(serve: bool) -> argparse.Namespace:
    return argparse.Namespace(rate=20.0 if serve else 40.0, seconds=20, rounds=3, signal="TERM", serve=serve)


def test_the_procfiles_processes_restart_one_at_a_time_under_load(pg_url: str, redis_url: str) -> None:
    migrated(pg_url)  # the release step's work, done
    found = rollout.run(args(False), pg_url, Path(tempfile.mkdtemp(prefix="wh-rollout-")), redis_url)
    assert found["restarts"] == 3 * 4
    assert found["lost"] == 0 and found["doubled"] == 0 and found["answered_5xx"] == 0, found
    assert found["processed"] == found["stored"] == found["answered_2xx"], found
    assert found["exit_max_s"] < 30, found  # within the platform's kill (measured 1.4 - 2 s idle, 10 s under CI's load)
    # No event waited for a lease: a clean stop releases what it held (a lease is at most MAX_LEASE).
    # The 30 s goal for received→processed is the benchmark's (benchmarks/README.md: 1.61 s max on a
    # quiet machine); under the whole suite's load on two cores CI measured 32.8 s and 37.3 s.
    assert found["max_s"] is not None and found["max_s"] < MAX_LEASE, found


def test_webhooks_serve_restarts_under_load(tmp_path: Path) -> None:
    found = rollout.run(args(True), f"sqlite:///{tmp_path / 'webhooks.db'}", tmp_path)
    assert found["restarts"] == 3
    assert found["lost"] == 0 and found["doubled"] == 0, found
    assert found["processed"] == found["stored"] >= found["answered_2xx"] > 0, found
    assert found["exit_max_s"] < 30, found
