"""The stages' layering, read from the source (the import walk of ``test_import_graph``).

Each module belongs to one layer, lowest first:

- ``foundation``: the top-level modules of ``webhooks`` (engines, errors, vocabulary, the queue,
  the metrics' counters, …), runtime configuration (``webhooks.configuration``), every table
  (``webhooks.tables``) and ``webhooks.providers``;
- ``store``: events in the database (``webhooks.store``) and the configuration's queries
  (``webhooks.store.configuration``);
- ``runtime``: ``webhooks.runtime``, which binds the configuration to a store and a queue, and its
  configuration watcher (``webhooks.runtime.watch``);
- the stages, each above the ones it may use: ``forward``, ``receiver``, ``worker``, ``admin``;
- ``jobs``: the RQ job functions and the migrations (``webhooks.jobs``, ``webhooks.migrations``);
- ``app``: the app factory (the package ``webhooks`` itself: ``create_app``, ``on``);
- ``service``: the processes (``webhooks.service``, and the two entry-point names kept at the top
  level: ``python -m webhooks`` and ``python:webhooks.gunicorn_conf``), and the application
  developer's test kit (``webhooks.testing``, a pytest plugin that builds the whole app).

A module imports only its own layer or lower ones; the one exception is the app factory's imports
inside ``create_app`` (lazy: it loads the stages it wires on first use, the health routes among
them). So the foundation and the store import no stage, and no two layers import each other.
"""

from __future__ import annotations

from pathlib import Path

from tests.service.test_import_graph import graph, imports, modules

LAYERS = ("foundation", "store", "runtime", "forward", "receiver", "worker", "admin", "jobs", "app", "service")
STAGES = {"store", "forward", "receiver", "worker", "admin", "service"}  # folders of ``webhooks``
FOUNDATION = {"providers", "configuration", "tables"}  # folders of the foundation
ENTRY_POINTS = {"webhooks.__main__", "webhooks.gunicorn_conf"}  # documented names, one-line shims
APP = "webhooks"


def layer(module: str) -> str:
    parts = module.split(".")
    if module == APP:
        return "app"
    if module in ENTRY_POINTS or parts[1] == "testing":
        return "service"
    if parts[1] == "runtime":
        return "runtime"
    if parts[1] in STAGES:
        return parts[1]
    if parts[1] in ("jobs", "migrations"):
        return "jobs"
    return "foundation"


def upward(g: dict[str, set[str]], top: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every import of a higher layer, but the app factory's lazy ones."""
    found = []
    for importer, imported in sorted((a, b) for a, bs in g.items() for b in bs):
        if LAYERS.index(layer(imported)) <= LAYERS.index(layer(importer)):
            continue
        if importer == APP and imported not in top[importer]:
            continue  # create_app's own, inside the function
        found.append(f"{importer} -> {imported}")
    return found


def test_every_module_has_a_layer_and_every_stage_folder_is_one() -> None:
    known = modules()
    folders = {name.split(".")[1] for name in known if name.count(".") >= 2}
    assert folders - {"jobs", "migrations", "runtime", "testing", *FOUNDATION} == STAGES
    assert {layer(name) for name in known} == set(LAYERS)


def test_no_module_imports_a_higher_layer() -> None:
    assert upward(graph(), graph(top_level_only=True)) == []


def test_the_foundation_and_the_store_import_no_stage() -> None:
    """Said apart from the ranks, as the issue says it: what the lower layers may never reach."""
    g = graph()
    low = [name for name in g if layer(name) in ("foundation", "store")]
    reached = {f"{name} -> {b}" for name in low for b in g[name] if layer(b) not in ("foundation", "store", "runtime")}
    assert reached == set()
    assert {
        f"{name} -> {b}" for name in low if layer(name) == "foundation" for b in g[name] if layer(b) != "foundation"
    } == set()


def test_a_planted_upward_import_is_found(tmp_path: Path) -> None:
    """The check above fails on a store module that imports the receiver, on a foundation module
    that imports the worker, and on the app factory importing a stage at its top."""
    known = modules()
    for module, planted in (
        ("webhooks.store.base", "from webhooks.receiver.receive import deliver"),
        ("webhooks.configuration.settings", "from webhooks.worker import handlers"),
        ("webhooks.forward.client", "from webhooks.admin import api"),
    ):
        copy = tmp_path / f"{module}.py"
        copy.write_text(known[module].read_text(encoding="utf-8") + f"\n\ndef _late() -> None:\n    {planted}\n")
        g, top = graph(), graph(top_level_only=True)
        g[module] = imports(module, copy, known)
        assert any(line.startswith(f"{module} -> ") for line in upward(g, top)), module
    app = tmp_path / "app.py"
    app.write_text(known[APP].read_text(encoding="utf-8") + "\nfrom webhooks.service import health\n")
    g, top = graph(), graph(top_level_only=True)
    g[APP] = imports(APP, app, known)
    top[APP] = imports(APP, app, known, top_level_only=True)
    assert f"{APP} -> webhooks.service.health" in upward(g, top)
