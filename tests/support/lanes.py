"""The slow tests' lanes (#39): the tests marked slow (servers, processes, real time) run in
``LANES`` lanes, each lane one test at a time in one of xdist's processes (``--dist loadgroup``;
``put`` gives a test its lane), so at most ``LANES`` slow tests run at once beside the fast ones.

Until 2026-12-06 the lanes existed only on paper: pytest 9.2 stopped reading the group xdist 3.8
writes (``put``), so every slow test ran wherever xdist sent it, up to three at once, and every
session's broker started in each of the three processes. The full suite passed so, in 12 min 21 s
here; one lane would make it the sum of its slow tests (1 468 s of test time in that run). Three lanes, one a process,
keep that concurrency and end the repeats: a module stays in one lane (its module-scoped fixtures
start once), and the modules that use one session's broker go together (``TOGETHER``: RabbitMQ,
NATS, the SQS emulator and Tansu start once a run, not once a process).

Lanes are balanced by each module's measured time (``WEIGHTS``: seconds, from a full run on the
2-core machine; only the balance depends on them, never a test's outcome); a module not listed
weighs ``DEFAULT``. ``python -m tests.support.lanes JUNIT.xml`` prints new weights from a run's
``--junitxml``.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

LANES = 3  # one a test process (-n 3): see the module docstring
DEFAULT = 20.0
# Modules that share a session-scoped broker: one lane starts it once for all of them (each
# module using the ``rabbitmq``, ``nats_server``, ``moto_server`` or ``kafka_broker`` fixture: a test checks).
TOGETHER: tuple[tuple[str, ...], ...] = (
    (
        "tests/forward/test_bus_processes.py",
        "tests/forward/test_bus_rabbitmq.py",
        "tests/forward/test_bus_nats.py",
        "tests/forward/test_bus_sqs.py",
        "tests/forward/test_bus_kafka.py",
        "tests/forward/test_traces.py",  # its RabbitMQ forward
    ),
)
# Measured 2026-12-06: junit times of a full run, setup included; every module with a slow test.
WEIGHTS: dict[str, float] = {
    "tests/admin/test_config_matches.py": 12,
    "tests/admin/test_config_seams.py": 17,
    "tests/admin/test_config_urls.py": 1,
    "tests/admin/test_console_browser.py": 28,
    "tests/admin/test_console_config_layout.py": 5,
    "tests/admin/test_console_inputs.py": 20,
    "tests/admin/test_console_layout.py": 9,
    "tests/admin/test_console_pages.py": 18,
    "tests/admin/test_outages.py": 7,
    "tests/admin/test_runtime_config.py": 4,
    "tests/faults/test_db_outage.py": 10,
    "tests/faults/test_ha_urls.py": 3,
    "tests/faults/test_processes.py": 41,
    "tests/faults/test_redis_outage.py": 16,
    "tests/faults/test_rollout.py": 186,
    "tests/faults/test_scaleout.py": 19,
    "tests/faults/test_storm.py": 57,
    "tests/faults/test_workers.py": 95,
    "tests/forward/test_bus_kafka.py": 33,
    "tests/forward/test_bus_nats.py": 22,
    "tests/forward/test_bus_processes.py": 240,
    "tests/forward/test_bus_rabbitmq.py": 44,
    "tests/forward/test_bus_redis_stream.py": 7,
    "tests/forward/test_bus_sqs.py": 15,
    "tests/forward/test_destination_down.py": 11,
    "tests/forward/test_fold_forwarding.py": 10,
    "tests/forward/test_isolation.py": 2,
    "tests/forward/test_once.py": 4,
    "tests/forward/test_ordered.py": 18,
    "tests/forward/test_targets.py": 2,
    "tests/forward/test_traces.py": 2,
    "tests/forward/test_worker_crash.py": 25,
    "tests/receiver/test_slow_senders.py": 30,
    "tests/service/test_bench_signals.py": 22,
    "tests/service/test_config_cli.py": 1,
    "tests/service/test_credential_binding.py": 1,
    "tests/service/test_health.py": 2,
    "tests/service/test_import_graph.py": 8,
    "tests/service/test_keys_cli.py": 6,
    "tests/service/test_listen.py": 43,
    "tests/service/test_live_config.py": 2,
    "tests/service/test_metrics.py": 11,
    "tests/service/test_packaging.py": 18,
    "tests/service/test_procfile.py": 17,
    "tests/service/test_quickstart.py": 29,
    "tests/service/test_runtime_config_processes.py": 21,
    "tests/service/test_safe_servers.py": 23,
    "tests/service/test_serve_processes.py": 40,
    "tests/service/test_startup.py": 24,
    "tests/service/test_startup_mistakes.py": 42,
    "tests/service/test_suite_isolation.py": 48,
    "tests/service/test_worker_probe.py": 8,
    "tests/testing/test_user_project.py": 15,
    "tests/worker/test_current_state.py": 57,
    "tests/worker/test_embedded_timeouts.py": 8,
    "tests/worker/test_fairness.py": 10,
}


def assign(modules: Iterable[str], lanes: int = LANES) -> dict[str, int]:
    """Each module's lane, 0 to ``lanes - 1``: the heaviest unit first into the lightest lane
    (ties by name, so every xdist process computes the same)."""
    names = sorted(set(modules))
    units: dict[str, list[str]] = {}
    for name in names:
        group = next((g for g in TOGETHER if name in g), None)
        units.setdefault(group[0] if group else name, []).append(name)
    weighed = sorted(units.values(), key=lambda unit: (-sum(WEIGHTS.get(m, DEFAULT) for m in unit), unit[0]))
    load = [0.0] * lanes
    found: dict[str, int] = {}
    for unit in weighed:
        lane = min(range(lanes), key=lambda n: (load[n], n))
        load[lane] += sum(WEIGHTS.get(m, DEFAULT) for m in unit)
        found.update(dict.fromkeys(unit, lane))
    return found


def put(item: Any, lane: int) -> None:
    """Run ``item`` in ``lane``: xdist's ``loadgroup`` sends every test whose node id ends in the same
    ``@group`` to one process, one at a time. xdist 3.8 makes that suffix from an ``xdist_group`` mark
    by writing the item's ``_nodeid``, which pytest 9.2 no longer reads (its node ids are structured,
    ``_id``): the mark then did nothing, silently, and every slow test ran wherever xdist sent it
    (pytest-dev/pytest-xdist#1386). The suffix is written here, where the installed pytest keeps it."""
    grouped = f"{item.nodeid}@slow-{lane}"
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId  # pytest >= 9.2

        item._id = NodeId.parse(grouped)
    else:
        item._nodeid = grouped
    assert item.nodeid == grouped, f"pytest keeps node ids elsewhere now: {item.nodeid!r}"


def measured(junit: str) -> dict[str, float]:
    """Seconds per test module in a ``--junitxml`` report."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        module = next((n for n, part in enumerate(parts) if part.startswith("test_")), None)
        if module is not None:
            seconds["/".join(parts[: module + 1]) + ".py"] += float(case.get("time", "0"))
    return dict(seconds)


if __name__ == "__main__":
    for module, spent in sorted(measured(sys.argv[1]).items()):
        print(f'    "{module}": {spent:.0f},')
