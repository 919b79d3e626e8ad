"""The slow tests' lanes (#39): the tests marked slow (servers, processes, real time) run in
``LANES`` lanes, each lane one test at a time in one of xdist's processes (``--dist loadgroup``),
so at most ``LANES`` slow tests run at once beside the fast ones. One lane made the suite as long
as the sum of its slow tests; three at once on two cores starved each other's deadlines.

A module stays in one lane (its module-scoped fixtures start once), and the modules that use one
session's broker go together (``TOGETHER``: RabbitMQ, NATS, the SQS emulator and Tansu start once a lane,
not once a module). Lanes are balanced by each module's measured time (``WEIGHTS``: seconds, from
a CI run on the 2-core machine; only the balance depends on them, never a test's outcome); a module
not listed weighs ``DEFAULT``. ``python -m tests.support.lanes JUNIT.xml`` prints new weights from a
run's ``--junitxml``.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterable

LANES = 1  # two lanes measured 15 min 10 s against 15 min 57 s, but CI then held the rollout test's 30 s goal to 37 s: one lane until the suite's work shrinks
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
WEIGHTS: dict[str, float] = {  # measured 2026-12-05 (junit times of a full run, setup included)
    "tests/admin/test_config_matches.py": 14,
    "tests/admin/test_config_seams.py": 24,
    "tests/admin/test_config_urls.py": 3,
    "tests/admin/test_console_browser.py": 27,
    "tests/admin/test_console_config_layout.py": 7,
    "tests/admin/test_console_inputs.py": 30,
    "tests/admin/test_console_layout.py": 11,
    "tests/admin/test_console_pages.py": 26,
    "tests/admin/test_runtime_config.py": 8,
    "tests/faults/test_db_outage.py": 12,
    "tests/faults/test_processes.py": 49,
    "tests/faults/test_redis_outage.py": 14,
    "tests/faults/test_rollout.py": 230,
    "tests/faults/test_scaleout.py": 26,
    "tests/faults/test_storm.py": 48,
    "tests/faults/test_workers.py": 113,
    "tests/forward/test_bus_kafka.py": 35,  # measured alone, 2026-12-06
    "tests/forward/test_bus_nats.py": 37,
    "tests/forward/test_bus_processes.py": 200,
    "tests/forward/test_bus_rabbitmq.py": 47,
    "tests/forward/test_bus_redis_stream.py": 24,
    "tests/forward/test_bus_sqs.py": 23,
    "tests/forward/test_destination_down.py": 11,
    "tests/forward/test_fold_forwarding.py": 20,
    "tests/forward/test_isolation.py": 2,
    "tests/forward/test_once.py": 7,
    "tests/forward/test_ordered.py": 27,
    "tests/forward/test_targets.py": 2,
    "tests/forward/test_worker_crash.py": 24,
    "tests/receiver/test_slow_senders.py": 31,
    "tests/service/test_bench_signals.py": 22,
    "tests/service/test_config_cli.py": 3,
    "tests/service/test_credential_binding.py": 2,
    "tests/service/test_import_graph.py": 9,
    "tests/service/test_keys_cli.py": 8,
    "tests/service/test_live_config.py": 4,
    "tests/service/test_metrics.py": 20,
    "tests/service/test_packaging.py": 16,
    "tests/service/test_quickstart.py": 29,
    "tests/service/test_runtime_config_processes.py": 28,
    "tests/service/test_safe_servers.py": 25,
    "tests/service/test_serve_processes.py": 43,
    "tests/service/test_startup.py": 17,
    "tests/service/test_startup_mistakes.py": 37,
    "tests/service/test_suite_isolation.py": 48,
    "tests/worker/test_current_state.py": 78,
    "tests/worker/test_embedded_timeouts.py": 7,
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
