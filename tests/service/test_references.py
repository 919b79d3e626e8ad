"""Every file under this repository's ``tests/`` that the code, its configuration or the manual
names exists: a test that moved takes its mentions along. Another project's test files that a page
cites as a payload's source (``tests/… of owner/repo``) are not ours."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

MENTION = re.compile(r"\btests/[A-Za-z0-9_./-]+\.(?:py|yml|yaml|json|txt|toml)\b")
FOREIGN = re.compile(r"`\s+of\s+[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")  # "`tests/x.json` of owner/repo"


def sources() -> list[Path]:
    found = [ROOT / "pyproject.toml"]
    for folder, pattern in (("webhooks", "*.py"), ("jobs", "*.py"), ("migrations", "*.py"), ("docs", "*.md")):
        found += sorted((ROOT / folder).rglob(pattern))
    return found


def mentions(text: str) -> list[str]:
    """The paths ``text`` names as this repository's tests, without those cited from other projects."""
    return [m.group() for m in MENTION.finditer(text) if not FOREIGN.match(text, m.end())]


def test_every_test_file_named_exists() -> None:
    missing = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sources()
        for name in mentions(path.read_text(encoding="utf-8"))
        if not (ROOT / name).exists()
    ]
    assert missing == []


def test_a_moved_test_is_seen_and_another_projects_is_not() -> None:
    assert mentions("pinned by tests/test_rq_private.py for the range") == ["tests/test_rq_private.py"]
    assert mentions("is `tests/responses/payment_single.json` of\nmollie/mollie-api-python") == []


# A path of this repository named in the docs, comments, benchmarks or pyproject.toml (#39: the
# toml named webhooks/forward/nats.py, benchmarks/pyspy.py looked for frames in files that moved).
PATH = re.compile(
    r"(?<![\w/.:-])((?:webhooks|jobs|benchmarks|migrations|examples|docs)/[\w/.-]*\w\.(?:py|md|toml|yml|yaml|html|css|json|js))\b"
)


def test_every_repository_path_named_exists() -> None:
    named = [ROOT / "pyproject.toml", ROOT / "README.md", ROOT / "Procfile", ROOT / "mkdocs.yml"]
    for folder, pattern in (
        ("docs", "*.md"),
        ("benchmarks", "*.py"),
        ("benchmarks", "*.md"),
        ("webhooks", "*.py"),
        ("jobs", "*.py"),
        ("examples", "*.md"),
    ):
        named += sorted((ROOT / folder).rglob(pattern))
    missing = sorted(
        f"{path.relative_to(ROOT)}: {found}"
        for path in named
        for found in PATH.findall(path.read_text(errors="replace"))
        if not (ROOT / found).exists() and not (path.parent / found).exists()
    )
    assert missing == []
