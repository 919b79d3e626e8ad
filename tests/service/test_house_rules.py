"""Two house rules read from the source: no module of ``webhooks/`` or ``jobs/`` passes
``MAX_LINES`` lines, and ``webhooks.configuration.settings`` is the only module that reads the environment
(``os.environ``, ``os.getenv``, ``os.environb``). Setting a variable (``os.environ[NAME] = …``, as
``process_setup`` must for ``PROMETHEUS_MULTIPROC_DIR`` before ``prometheus_client`` is imported)
is not a read. Each check is a function of source text, proved on a planted example."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

MAX_LINES = 400
READER = ROOT / "webhooks" / "configuration" / "settings.py"


def sources() -> list[Path]:
    return sorted([*(ROOT / "webhooks").rglob("*.py"), *(ROOT / "jobs").rglob("*.py")])


def too_long(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            found.append(f"{path.name}: {lines} lines")
    return found


def _is_environ(node: ast.AST) -> bool:
    """``os.environ`` / ``os.environb`` / a bare ``environ`` imported from ``os``."""
    if isinstance(node, ast.Attribute):
        return node.attr in ("environ", "environb") and isinstance(node.value, ast.Name) and node.value.id == "os"
    return False


def environment_reads(source: str) -> list[int]:
    """The lines of ``source`` that read the environment (a store into ``os.environ[...]`` is not one)."""
    tree = ast.parse(source)
    stores = {
        id(target.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Subscript) and _is_environ(target.value)
    }
    found = []
    for node in ast.walk(tree):
        if (
            (_is_environ(node) and id(node) not in stores)
            or (
                isinstance(node, ast.Attribute)
                and node.attr in ("getenv", "getenvb")
                and ast.unparse(node.value) == "os"
            )
            or (
                isinstance(node, ast.ImportFrom)
                and node.module == "os"
                and any(a.name in ("environ", "environb", "getenv", "getenvb") for a in node.names)
            )
        ):
            found.append(node.lineno)
    return sorted(found)


def test_no_module_passes_the_line_limit() -> None:
    assert too_long(sources()) == []


def test_the_line_limit_check_sees_a_long_module(tmp_path: Path) -> None:
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_LINES + 1))
    short = tmp_path / "short.py"
    short.write_text("x = 1\n" * MAX_LINES)
    assert too_long([long, short]) == [f"long.py: {MAX_LINES + 1} lines"]


def test_config_is_the_only_reader_of_the_environment() -> None:
    readers = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in sources()
        if path != READER
        for line in environment_reads(path.read_text(encoding="utf-8"))
    }
    assert readers == set()
    assert environment_reads(READER.read_text(encoding="utf-8"))  # it does read it


def test_each_way_of_reading_the_environment_is_seen() -> None:
    planted = [
        "import os\nx = os.environ.get('PORT')\n",
        "import os\nx = os.environ['PORT']\n",
        "import os\nx = os.getenv('PORT')\n",
        "import os\nx = dict(os.environ)\n",
        "from os import environ\n",
        "from os import getenv\n",
    ]
    assert [bool(environment_reads(source)) for source in planted] == [True] * len(planted)
    assert environment_reads("import os\nos.environ['X'] = '1'\n") == []  # setting is not reading


TOP_LEVEL_LIMIT = 16  # the maintainers' issue (#39): what is left at the top is the foundation's plumbing
NOT_COUNTED = {"__init__.py", "__main__.py", "gunicorn_conf.py"}  # the package, and two operator-facing names


def test_the_package_top_level_stays_small() -> None:
    """Ideas live in packages (``configuration``, ``tables``, the stages); the top level of
    ``webhooks`` holds at most ``TOP_LEVEL_LIMIT`` modules."""
    top = sorted(p.name for p in (ROOT / "webhooks").glob("*.py") if p.name not in NOT_COUNTED)
    assert len(top) <= TOP_LEVEL_LIMIT, top
