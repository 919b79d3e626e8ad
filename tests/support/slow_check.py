"""The collection-time check of the slow marker (#39): a test that starts a process or a server
must be marked ``slow`` (it runs in a slow lane, tests/support/lanes.py, and stays out of the
fast tier). Read from the source: a test starts one when its function, or a function of its
module that it calls (however deep), calls one of ``STARTS`` (``subprocess.Popen``, the suite's
process helpers, a server's ``start``), or when it asks for a fixture in ``SERVER_FIXTURES``
(one started for it alone) or for a fixture of its module that starts one. The session's shared PostgreSQL and Redis (``pg_url``,
``redis_url``) start once for the whole run: they do not count.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache
from pathlib import Path

# Calls that start a process, by their dotted name as written: Popen and the suite's helpers
# (tests/support/processes.py ``running``; tests/faults/conftest.py ``gunicorn`` and ``worker``;
# pytester's run of a project in a pytest process of its own).
STARTS = frozenset(
    {"subprocess.Popen", "Popen", "running", "processes.running", "gunicorn", "worker", "pytester.runpytest_subprocess"}
)
# A server the test makes itself: one of these constructed and started (``server.start()``).
SERVER_CLASSES = frozenset({"Postgres", "Redis", "RabbitMQ", "NatsServer", "MotoServer", "Tansu"})
SERVER_FIXTURES = frozenset(
    {"postgres", "redis_server", "rabbitmq", "nats_server", "moto_server", "kafka_broker", "browser"}
)


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return ""


@cache
def starters(path: Path) -> frozenset[str]:
    """The functions of the module at ``path`` that start a process or a server, themselves or
    through another function of the module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls: dict[str, set[str]] = {}
    direct: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        named = calls.setdefault(node.name, set())
        for inner in ast.walk(node):
            if isinstance(inner, ast.Call):
                named.add(_name(inner.func))
        if named & STARTS or (
            any(n.split(".")[-1] in SERVER_CLASSES for n in named) and any(n.endswith(".start") for n in named)
        ):
            direct.add(node.name)
    found = set(direct)
    changed = True
    while changed:  # a function that calls a starter of its module starts one too
        changed = False
        for name, called in calls.items():
            if name not in found and called & found:
                found.add(name)
                changed = True
    return frozenset(found)


def unmarked(tests: Iterable[tuple[Path, str, Iterable[str], bool]]) -> list[str]:
    """``path::function`` of each test (path, function name, its fixtures, whether it is marked
    slow) that starts a process or a server and is not marked slow."""
    found = []
    for path, function, fixtures, slow in tests:
        if slow:
            continue
        started = starters(path)
        if function in started or (SERVER_FIXTURES | started) & set(fixtures):
            found.append(f"{path.name}::{function}")
    return sorted(set(found))
