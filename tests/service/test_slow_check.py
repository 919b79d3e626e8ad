"""The collection-time check of the slow marker (tests/support/slow_check.py) sees each way a
test starts a process or a server, and passes a test that starts none."""

from __future__ import annotations

from pathlib import Path

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
