"""The packages' import rules, read from the source (``ast``):

- no links: no symlinked package or module under ``webhooks/``, ``jobs/`` or ``migrations/``
  (``jobs/`` and ``migrations/`` are installed as ``webhooks.jobs`` / ``webhooks.migrations`` by
  pyproject's package-dir, never through a link);
- no aliasing: no ``sys.modules[...] = ...`` (one module, one name);
- one direction: ``webhooks.jobs`` and ``webhooks.migrations`` import ``webhooks``, no module of
  ``webhooks`` imports ``webhooks.jobs`` (or ``jobs``), not even inside a function or for types;
- no cycles among all of them: the graph of imports (also those inside functions, which merely
  hide a cycle; ``if TYPE_CHECKING:`` blocks excepted, as they never run) is acyclic, and the
  type-only imports close no cycle either.

Each check is a function of a tree, proved by a test that feeds it a small fake tree.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

# The installed package names of the checkout's folders (pyproject.toml's package-dir).
PACKAGES = {"webhooks": "webhooks", "webhooks.jobs": "jobs", "webhooks.migrations": "migrations"}
WORKER_SIDE = ("webhooks.jobs", "webhooks.migrations")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the three packages under its installed name (links are not followed)."""
    found = {}
    for package, folder in PACKAGES.items():
        base = root / folder
        for directory, _, files in os.walk(base):
            for file in files:
                if file.endswith(".py"):
                    path = Path(directory) / file
                    parts = [*package.split("."), *path.relative_to(base).with_suffix("").parts]
                    found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def links(root: Path = ROOT) -> list[str]:
    """Symlinks among the packages' files and folders (a package folder that is a link included)."""
    found = []
    for folder in PACKAGES.values():
        base = root / folder
        if base.is_symlink():
            found.append(folder)
            continue
        for directory, dirs, files in os.walk(base):
            found += [
                str((Path(directory) / n).relative_to(root)) for n in dirs + files if (Path(directory) / n).is_symlink()
            ]
    return sorted(found)


def _is_sys_modules(node: ast.AST) -> bool:
    return ast.unparse(node) in ("sys.modules", "modules")


def aliases(known: dict[str, Path]) -> list[str]:
    """``module:line`` of every write to ``sys.modules`` (item assignment, ``update``, ``setdefault``)."""
    found = []
    for name, path in sorted(known.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            targets = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple | ast.List) else [t])]
            written = any(isinstance(t, ast.Subscript) and _is_sys_modules(t.value) for t in targets)
            called = (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("update", "setdefault", "__setitem__")
                and _is_sys_modules(node.func.value)
            )
            if written or called:
                found.append(f"{name}:{node.lineno}")
    return found


def _runs(tree: ast.AST, *, types: bool = False) -> list[ast.AST]:
    """Every node that can run, skipping the bodies of ``if TYPE_CHECKING:`` (unless ``types``)."""
    nodes, todo = [], [tree]
    while todo:
        node = todo.pop()
        nodes.append(node)
        if (
            not types
            and isinstance(node, ast.If)
            and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        ):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return nodes


def _named(name: str) -> str:
    """The installed name of an imported module: the checkout's top-level ``jobs`` is ``webhooks.jobs``."""
    for top in ("jobs", "migrations"):
        if name == top or name.startswith(top + "."):
            return "webhooks." + name
    return name


@functools.lru_cache(maxsize=4096)
def _parsed(path: Path, stamp: tuple[int, int]) -> ast.Module:
    """A module's tree, parsed once per version of the file (its mtime and size): a dozen tests walk
    the whole package, and parsing it again each time was 2.5 % of the fast tier's samples."""
    return ast.parse(path.read_text(encoding="utf-8"))


def imports(
    name: str, path: Path, known: dict[str, Path], *, top_level_only: bool = False, types: bool = False
) -> set[str]:
    stat = path.stat()
    tree = _parsed(path, (stat.st_mtime_ns, stat.st_size))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = [n for n in tree.body if not isinstance(n, ast.If)] if top_level_only else _runs(tree, types=types)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(_named(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _named(node.module or "")
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            submodules = {f"{base}.{a.name}" for a in node.names} & known.keys()
            found.update(submodules)
            if len(submodules) < len(node.names):  # names from the module itself
                found.add(base)
    return {m for m in found if m in known and m != name}


def reverse_imports(known: dict[str, Path]) -> list[str]:
    """``importer -> imported`` for every import (anywhere, for types too) of ``webhooks.jobs`` by
    a module of ``webhooks`` outside it."""
    found = []
    for name, path in sorted(known.items()):
        if name.startswith(WORKER_SIDE):
            continue
        for imported in sorted(imports(name, path, known, types=True)):
            if imported == "webhooks.jobs" or imported.startswith("webhooks.jobs."):
                found.append(f"{name} -> {imported}")
    return found


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def graph(*, top_level_only: bool = False, types: bool = False, root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {
        name: imports(name, path, known, top_level_only=top_level_only, types=types) for name, path in known.items()
    }


def test_the_walk_sees_the_package_and_its_imports() -> None:
    g = graph(top_level_only=False)
    assert {
        "webhooks.receiver.receive",
        "webhooks.receiver.quarantine",
        "webhooks.admin.rejections",
        "webhooks.jobs.process",
    } <= g.keys()
    assert "webhooks.receiver.quarantine" in g["webhooks.receiver.receive"]
    assert "webhooks.providers.paypal_certs" in g["webhooks.providers.paypal"]  # the late import counts
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_module_level_imports_are_acyclic() -> None:
    assert cycles(graph(top_level_only=True)) == []


def test_imports_inside_functions_hide_no_cycle() -> None:
    assert cycles(graph(top_level_only=False)) == []


def test_an_import_inside_a_function_that_closes_a_cycle_is_seen(tmp_path: Path) -> None:
    """The check above would fail on the cycles it once listed: batch <-> receive, and
    runtime -> reconcile -> rows -> batch -> runtime, each re-made by one late import."""
    known = modules()
    for module, late, through in (
        ("webhooks.receiver.batch", "from webhooks.receiver.receive import deliver", "webhooks.receiver.receive"),
        ("webhooks.runtime", "from webhooks.worker import reconcile", "webhooks.receiver.rows"),
    ):
        copy = tmp_path / f"{module}.py"
        copy.write_text(known[module].read_text(encoding="utf-8") + f"\n\ndef _late() -> None:\n    {late}\n")
        g = graph(top_level_only=False)
        g[module] = imports(module, copy, known, top_level_only=False)
        assert any(module in c and through in c for c in cycles(g)), module


def test_the_walk_sees_jobs_and_migrations_under_their_installed_names() -> None:
    g = graph()
    assert {"webhooks.jobs.process", "webhooks.jobs.worker", "webhooks.migrations.env"} <= g.keys()
    assert "webhooks.jobs.objects" in g["webhooks.jobs.process"]  # a relative import
    assert "webhooks.worker.loop" in g["webhooks.jobs.worker"]


def test_the_types_only_imports_close_no_cycle() -> None:
    """``if TYPE_CHECKING:`` imports never run, but a circle of them (metrics <-> runtime, once)
    still ties two modules into one: none is left."""
    assert cycles(graph(types=True)) == []


def test_no_package_or_module_is_a_link() -> None:
    assert links() == []


def test_no_module_aliases_another_in_sys_modules() -> None:
    assert aliases(modules()) == []


def test_webhooks_never_imports_the_jobs() -> None:
    assert reverse_imports(modules()) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in {
        "webhooks/__init__.py": "",
        "jobs/__init__.py": "",
        "migrations/__init__.py": "",
        **files,
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def test_a_linked_package_or_module_is_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"webhooks/a.py": ""})
    assert links(root) == []
    (root / "webhooks" / "jobs").symlink_to(root / "jobs", target_is_directory=True)
    (root / "jobs" / "b.py").symlink_to(root / "webhooks" / "a.py")
    assert links(root) == ["jobs/b.py", "webhooks/jobs"]
    other = tmp_path / "elsewhere"
    other.mkdir()
    (root / "migrations").rename(other / "migrations")
    (root / "migrations").symlink_to(other / "migrations", target_is_directory=True)
    assert "migrations" in links(root)


def test_an_alias_in_sys_modules_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "jobs/__init__.py": """
            import sys
            from webhooks import a
            if __name__ == "jobs":
                sys.modules["jobs.a"] = a
        """,
            "webhooks/a.py": """
            import sys
            def alias(x):
                sys.modules["old"], sys.modules["older"] = x, x
                sys.modules.setdefault("oldest", x)
            print(sys.modules["webhooks"])  # reading is fine
        """,
        },
    )
    assert aliases(modules(root)) == ["webhooks.a:4", "webhooks.a:5", "webhooks.jobs:5"]


def test_a_reverse_import_is_reported_however_it_is_written(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "jobs/process.py": "from webhooks import a\n",  # the allowed direction
            "jobs/worker.py": "from . import process\n",
            "webhooks/a.py": "def f():\n    from webhooks.jobs import process\n",
            "webhooks/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import jobs.worker\n",
            "webhooks/c.py": "from webhooks import jobs\n",
            "webhooks/d.py": "from webhooks import a, b, c\n",
        },
    )
    assert reverse_imports(modules(root)) == [
        "webhooks.a -> webhooks.jobs.process",
        "webhooks.b -> webhooks.jobs.worker",
        "webhooks.c -> webhooks.jobs",
    ]


def test_a_cycle_across_the_packages_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "jobs/process.py": "from webhooks import a\n",
            "migrations/env.py": "from webhooks import b\n",
            "webhooks/a.py": "def f():\n    import jobs.process\n",  # also a reverse import
            "webhooks/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from webhooks.c import C\n",
            "webhooks/c.py": "from webhooks import b\n",
        },
    )
    assert cycles(graph(root=root)) == [{"webhooks.a", "webhooks.jobs.process"}]
    assert cycles(graph(root=root, top_level_only=True)) == []
    assert sorted(map(sorted, cycles(graph(root=root, types=True)))) == [
        ["webhooks.a", "webhooks.jobs.process"],
        ["webhooks.b", "webhooks.c"],
    ]


def test_admin_modules_add_their_routes_only_when_the_package_registers_them() -> None:
    script = textwrap.dedent("""
        import json
        import webhooks.admin as admin
        from webhooks.admin import api, config_api, destinations, gaps, pages, quarantine_pages, rejections
        from webhooks.admin import filter_test, stream, token_views
        before = len(api.bp.deferred_functions), len(pages.bp.deferred_functions)
        admin.blueprints()
        admin.blueprints()  # once per process, however many apps are made
        print(json.dumps([before, (len(api.bp.deferred_functions), len(pages.bp.deferred_functions))]))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    # api: 3 rejections + gaps + 5 destinations + tokens + 13 runtime configuration (config_api)
    # + 2 the event stream's (stream) + 1 filter_test; pages: 3 rejections + gaps + 5 destinations
    # + tokens + 2 config_pages + 11 config_forms + 1 filter_test (the console's tester)
    assert after == [before[0] + 26, before[1] + 24]


@pytest.mark.slow
def test_no_broker_client_is_imported_without_a_bus_destination(tmp_path: Path) -> None:
    """#39: every app imported pika, nats-py and botocore (create_app 0.72 s of which 0.9 s was
    ``webhooks.forward.kinds``). A bus's client is imported when a destination of its kind is first
    built: ``create_app()`` and the worker's loop without one import none."""
    probe = f"""
import sys
import webhooks
from webhooks.worker import loop
webhooks.create_app({{"DATABASE_URL": "sqlite:///{tmp_path / "probe.db"}"}})
print(sorted(m for m in ("pika", "nats", "botocore", "boto3", "confluent_kafka") if m in sys.modules))
"""
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert found.stdout.strip().splitlines()[-1] == "[]", found.stdout + found.stderr
