"""Where runtime configuration meets the other features (the seams issue #37): a worker whose
snapshot does not know an event's endpoint reads the database before processing it; no time value
an operator types can freeze configuration; a secret's expiry binds every process at its time;
admin input is bounded before it is stored."""

from __future__ import annotations

import pytest

from tests.admin.test_runtime_config import DEST_SECRET, SECRET, SHOP, api, config, deliver, rt
from tests.conftest import drain, make_app, rows


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_worker_that_has_not_seen_an_endpoint_reads_it_before_processing(
    db: str, request: pytest.FixtureRequest
) -> None:
    """Finding 1's second half: the worker's snapshot predates the endpoint (its watcher has not
    seen the change yet); its first event must still be forwarded, never ``processed`` bare."""
    web = make_app(config(request, db))
    worker = make_app(config(request, db))
    assert rt(worker).watcher is not None
    rt(worker).watcher.stop.set()  # this process has not seen what follows
    rt(worker).watcher.thread.join(10)
    client = web.test_client()
    dest = {"name": "orders", "url": "http://127.0.0.1:9/hooks", "allow_private": True, "secrets": [DEST_SECRET]}
    assert api(client, "POST", "/destinations", dest).status_code == 201
    assert api(client, "POST", "/endpoints", {**SHOP, "forward": ["orders"]}).status_code == 201
    assert "shop-eu" not in rt(worker).settings.endpoints
    assert deliver(web, "shop-eu", "evt_first", SECRET) == 200
    if db == "sqlite":  # each test app has an embedded queue of its own: the job reaches the worker's
        rt(worker).queue.requeue("shop-eu", "evt_first", force=True)
    drain(worker)
    assert rows(worker, "SELECT status FROM events WHERE event_id = 'evt_first'")[0][0] == "processed"
    assert rows(worker, "SELECT destination FROM deliveries WHERE event_id = 'evt_first'") == [("orders",)]
