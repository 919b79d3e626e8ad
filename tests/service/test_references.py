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
