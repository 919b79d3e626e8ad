"""Every registered kind is whole: payloads, a docs page linked from the index, the manual's nav and
the README, a threat-model row, ``webhooks send`` support, and the tables the catalogue, fuzz and
signature-shape suites draw their endpoints from. A kind added with one of these missing fails here,
naming what it lacks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import catalogue, signing
from webhooks.providers import PROVIDERS
from webhooks.providers.base import Provider

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _threat_rows() -> set[str]:
    return set(re.findall(r"^\| `([a-z0-9_]+)`[^|]*\|", (DOCS / "threat-model.md").read_text(), re.M))


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
def test_every_kind_has_everything(kind: str) -> None:
    provider = PROVIDERS[kind]
    missing = []
    if not any((ROOT / "tests" / "payloads" / kind).glob("*")):
        missing.append(f"payloads under tests/payloads/{kind}/")
    if not (DOCS / "providers" / f"{kind}.md").is_file():
        missing.append(f"docs/providers/{kind}.md")
    if f"({kind}.md)" not in (DOCS / "providers" / "index.md").read_text():
        missing.append("a link from docs/providers/index.md")
    if f"providers/{kind}.md" not in (ROOT / "mkdocs.yml").read_text():
        missing.append("an entry in mkdocs.yml's nav")
    if f"(docs/providers/{kind}.md)" not in (ROOT / "README.md").read_text():
        missing.append("a link from README.md")
    if kind not in _threat_rows():
        missing.append("a row in docs/threat-model.md")
    if type(provider).sign is Provider.sign:
        missing.append("`sign` (webhooks send)")
    if kind not in catalogue.SENT:
        missing.append("a payload `webhooks send` posts (tests/support/catalogue.py SENT)")
    if not any(e.get("provider", name) == kind for name, e in catalogue.all_endpoints().items()):
        missing.append("an endpoint in tests/support/catalogue.py")
    if kind not in signing.ENDPOINTS:
        missing.append("an endpoint for the fuzz and signature-shape suites (tests/support/signing.py)")
    assert missing == [], f"{kind} lacks: {', '.join(missing)}"
