"""Highly available services by URL: Redis found through Sentinel (``redis+sentinel://…``) and a
PostgreSQL URL naming several hosts (libpq's ``host=a,b&port=…&target_session_attrs=read-write``)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from flask import Flask
from sqlalchemy.engine import make_url

from tests.conftest import (
    base_config,
    drain,
    free_port,
    make_app,
    rows,
    runtime,
    stripe_event,
    stripe_headers,
    wait_until,
)
from tests.faults.services import Redis
from webhooks import urls
from webhooks.configuration import settings as config
from webhooks.errors import ConfigError
from webhooks.queue import job_id


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[tuple[str, Redis]]:
    """A throwaway redis-server and a sentinel (``redis-server --sentinel``) monitoring it as
    ``mymaster``; yields the sentinel URL and the server."""
    if not shutil.which("redis-server"):
        pytest.skip("redis-server is not available")
    server = Redis()
    server.start()
    port = free_port()
    conf = tmp_path / "sentinel.conf"  # sentinel rewrites its file: a writable copy of its own
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 {server.port} 1\n"
        "sentinel down-after-milliseconds mymaster 2000\n"
    )
    proc = subprocess.Popen(
        ["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        client = redis.Redis(port=port)
        wait_until(lambda: _master(client), timeout=30)
        yield f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{port}/mymaster/3", server
    finally:
        proc.terminate()
        proc.wait(15)
        server.stop()


def _master(client: redis.Redis) -> bool:
    try:
        return bool(client.execute_command("SENTINEL", "get-master-addr-by-name", "mymaster"))
    except redis.RedisError:
        return False


def deliver(app: Flask, event_id: str) -> None:
    body = stripe_event(event_id)
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200


@pytest.mark.slow
def test_redis_through_sentinel_whose_first_sentinel_is_down(pg_url: str, sentinel: tuple[str, Redis]) -> None:
    url, server = sentinel
    app = make_app(base_config(pg_url, REDIS_URL=url))
    deliver(app, "evt_sentinel")
    # The job is in the master the sentinel named, in the URL's database.
    behind = redis.Redis(port=server.port, db=3)
    assert behind.lrange("rq:queue:default", 0, -1) == [job_id("stripe", "evt_sentinel").encode()]
    drain(app)
    assert rows(app, "SELECT status FROM events")[0][0] == "processed"


def test_sentinel_urls_parse_and_malformed_ones_fail_at_start() -> None:
    found = urls.sentinels("redis+sentinel://:s%40cret@a:26379,b/mymaster/2")
    assert found == urls.Sentinels((("a", 26379), ("b", 26379)), "mymaster", 2, None, "s@cret")
    assert urls.sentinels("redis://127.0.0.1:6379/0") is None
    for bad in ("redis+sentinel://a:26379", "redis+sentinel://a:port/mymaster", "redis+sentinel://a/mymaster/x"):
        with pytest.raises(ConfigError, match="REDIS_URL"):
            config.load({"REDIS_URL": bad})


def test_postgres_url_with_several_hosts_whose_first_is_down(pg_url: str, redis_url: str) -> None:
    # libpq tries the hosts in order and keeps the first that accepts writes.
    real = make_url(pg_url)
    down = free_port()  # nothing listens there
    url = real.set(
        host=None,
        port=None,
        query={
            "host": f"127.0.0.1,{real.host}",
            "port": f"{down},{real.port or 5432}",
            "target_session_attrs": "read-write",
        },
    ).render_as_string(hide_password=False)
    app = make_app(base_config(url, REDIS_URL=redis_url))  # migrations run through the same URL
    deliver(app, "evt_multihost")
    drain(app)
    assert rows(app, "SELECT event_id, status FROM events") == [("evt_multihost", "processed")]
    assert runtime(app).engine.url.query["port"] == f"{down},{real.port or 5432}"
