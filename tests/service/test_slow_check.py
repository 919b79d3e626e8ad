"""The collection-time check of the slow marker (tests/support/slow_check.py) sees each way a
test starts a process or a server, and passes a test that starts none."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.slow_check import unmarked

PLANTED = """
import subprocess
from tests.support import brokers
from tests.support.processes import running


def helper():
    return subprocess.Popen(["true"])


def a_fixture():
    yield running(["webhooks", "serve"], {})


def test_popen():
    subprocess.Popen(["true"]).wait()


def test_through_a_helper():
    helper()


def test_a_broker():
    server = brokers.RabbitMQ()
    server.start()


def test_a_fixture_of_its_module(a_fixture):
    pass


def test_a_server_fixture(postgres):
    pass


def test_nothing(pg_url):
    assert 1 + 1 == 2
"""


def test_every_way_of_starting_one_is_seen_and_a_plain_test_passes(tmp_path: Path) -> None:
    module = tmp_path / "test_planted.py"
    module.write_text(PLANTED)
    tests = [
        (module, "test_popen", [], False),
        (module, "test_through_a_helper", [], False),
        (module, "test_a_broker", [], False),
        (module, "test_a_fixture_of_its_module", ["a_fixture"], False),
        (module, "test_a_server_fixture", ["postgres"], False),
        (module, "test_nothing", ["pg_url"], False),
    ]
    assert unmarked(tests) == sorted(f"test_planted.py::{name}" for _, name, _, _ in tests[:5])
    assert unmarked([(path, name, fixtures, True) for path, name, fixtures, _ in tests]) == []  # marked slow


def test_every_module_using_a_session_broker_shares_its_lane() -> None:
    """A module asking for a session broker outside ``lanes.TOGETHER`` would start a second one
    in another lane (an Erlang VM for RabbitMQ): every such module is listed there."""
    from tests.support.lanes import TOGETHER

    root = Path(__file__).parent.parent
    brokers = tuple(f"{name}: brokers.Broker" for name in ("rabbitmq", "nats_server", "moto_server", "kafka_broker"))
    using = {
        path.relative_to(root.parent).as_posix()
        for path in root.rglob("test_*.py")
        if path != Path(__file__) and any(b in path.read_text(encoding="utf-8") for b in brokers)
    }
    together = {module for group in TOGETHER for module in group}
    assert using and using <= together, sorted(using - together)


def test_every_slow_test_runs_in_its_lane_and_no_fast_test_in_one(request: pytest.FixtureRequest) -> None:
    """Under the README's command (``-n 3 --dist loadgroup``) each slow test's node id ends in its
    lane's group, the one ``lanes.assign`` gives its module, so xdist runs a lane in one process, one
    test at a time; a fast test is in none. In one process (``-n 0``) nothing is renamed. The lanes
    once existed only on paper: pytest 9.2 stopped reading what xdist wrote (``lanes.put``)."""
    from tests.support import lanes

    items = [item for item in request.session.items if isinstance(item, pytest.Function)]
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    fast = [item for item in items if item.get_closest_marker("slow") is None]
    assert fast and request.node in fast
    assert not [item.nodeid for item in fast if "@slow-" in item.nodeid]
    if not getattr(request.config.option, "loadgroup", False):
        assert not [item.nodeid for item in slow if "@slow-" in item.nodeid]
        return
    root = Path(__file__).resolve().parents[2]
    module = {item.nodeid: item.path.relative_to(root).as_posix() for item in slow}
    lane = lanes.assign(module.values())
    assert not [n for n in module if not n.endswith(f"@slow-{lane[module[n]]}")]
