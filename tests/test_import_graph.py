"""No import cycles among ``webhooks`` modules: the graph of imports (also those inside functions,
which merely hide a cycle; ``if TYPE_CHECKING:`` blocks excepted, as they never run) is acyclic."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import webhooks

ROOT = Path(webhooks.__file__).parent


def modules() -> dict[str, Path]:
    found = {}
    for folder, _, files in os.walk(ROOT, followlinks=True):  # webhooks/jobs links to jobs/
        for file in files:
            if file.endswith(".py"):
                path = Path(folder) / file
                parts = ["webhooks", *path.relative_to(ROOT).with_suffix("").parts]
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _runs(tree: ast.AST) -> list[ast.AST]:
    """Every node that can run, skipping the bodies of ``if TYPE_CHECKING:``."""
    nodes, todo = [], [tree]
    while todo:
        node = todo.pop()
        nodes.append(node)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return nodes


def imports(name: str, path: Path, known: dict[str, Path], *, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = [n for n in tree.body if not isinstance(n, ast.If)] if top_level_only else _runs(tree)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            submodules = {f"{base}.{a.name}" for a in node.names} & known.keys()
            found.update(submodules)
            if len(submodules) < len(node.names):  # names from the module itself
                found.add(base)
    return {m for m in found if m in known and m != name}


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


def graph(*, top_level_only: bool) -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known, top_level_only=top_level_only) for name, path in known.items()}


def test_the_walk_sees_the_package_and_its_imports() -> None:
    g = graph(top_level_only=False)
    assert {"webhooks.receive", "webhooks.quarantine", "webhooks.admin.rejections", "webhooks.jobs.process"} <= g.keys()
    assert "webhooks.quarantine" in g["webhooks.receive"]
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
    for module, late, through in (("webhooks.batch", "from webhooks.receive import deliver", "webhooks.receive"),
                                  ("webhooks.runtime", "from webhooks import reconcile", "webhooks.rows")):
        copy = tmp_path / f"{module}.py"
        copy.write_text(known[module].read_text(encoding="utf-8") + f"\n\ndef _late() -> None:\n    {late}\n")
        g = graph(top_level_only=False)
        g[module] = imports(module, copy, known, top_level_only=False)
        assert any(module in c and through in c for c in cycles(g)), module


def test_admin_modules_add_their_routes_only_when_the_package_registers_them() -> None:
    script = textwrap.dedent("""
        import json
        import webhooks.admin as admin
        from webhooks.admin import api, gaps, pages, quarantine_pages, rejections
        before = len(api.bp.deferred_functions), len(pages.bp.deferred_functions)
        admin.blueprints()
        admin.blueprints()  # once per process, however many apps are made
        print(json.dumps([before, (len(api.bp.deferred_functions), len(pages.bp.deferred_functions))]))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert after == [before[0] + 4, before[1] + 4]  # api: 3 rejections + gaps; pages: 3 rejections + gaps
