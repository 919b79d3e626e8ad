"""The manual stays true: every test the guarantees page names exists, the README stays a short
front page that reaches every page of ``docs/``, and every endpoint example in the docs starts.

(``mkdocs build --strict`` in ``.ci/run`` checks links, anchors, the nav and included files.)
"""

from __future__ import annotations

import ast
import base64
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from webhooks import guard
from webhooks.configuration import settings as config

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TESTS = ROOT / "tests"
README_MAX_LINES = 150
SPAN = re.compile(r"`([^`]+)`")
NAMED = re.compile(r"^(?P<file>(?:tests/|benchmarks/)?[\w/]+\.py)?(?:::(?P<name>\w+))?$")


@cache
def functions(path: Path) -> frozenset[str]:
    """Every function defined in a module, at any depth (tests in classes too)."""
    tree = ast.parse(path.read_text())
    return frozenset(n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))


def resolve(file: str) -> Path | None:
    """A path from the repository's root, or a bare ``test_x.py`` found once under ``tests/``."""
    if "/" in file:
        path = ROOT / file
        return path if path.is_file() else None
    found = sorted(TESTS.rglob(file))
    return found[0] if len(found) == 1 else None


def missing_in(cell: str) -> list[str]:
    """What a "proved by" cell names that does not exist: ``file.py``, ``file.py::test``,
    ``::test`` (in the file named last) or a bare ``test_name``."""
    missing: list[str] = []
    current: Path | None = None
    for span in SPAN.findall(cell):
        if re.fullmatch(r"test_\w+", span):
            span = f"::{span}"
        match = NAMED.match(span)
        if not match or not (match["file"] or match["name"]):
            continue  # prose in code (a figure, a variable), not a reference
        if match["file"]:
            current = resolve(match["file"])
            if current is None:
                missing.append(span)
                continue
        name = match["name"]
        if name and (current is None or name not in functions(current)):
            missing.append(span if current is None else f"{current.relative_to(ROOT)}::{name}")
    return missing


def guarantee_rows() -> list[tuple[str, str]]:
    """(promise, proved by) for each row of the guarantees table."""
    rows = []
    for line in (DOCS / "guarantees.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 2 and cells[0] != "promise" and not set(cells[0]) <= {"-"}:
            rows.append((cells[0], cells[1]))
    return rows


def test_every_test_the_guarantees_page_names_exists() -> None:
    rows = guarantee_rows()
    assert len(rows) >= 20
    named = sum(len(SPAN.findall(proof)) for _, proof in rows)
    assert named >= len(rows)  # every promise names its proof
    missing = {promise[:60]: gone for promise, proof in rows if (gone := missing_in(proof))}
    assert missing == {}


@pytest.mark.parametrize(
    ("cell", "missing"),
    [
        ("`test_receive.py::test_no_such_test`", ["tests/receiver/test_receive.py::test_no_such_test"]),
        ("`tests/faults/test_storm.py` (ok), `::test_gone`", ["tests/faults/test_storm.py::test_gone"]),
        ("`tests/test_renamed_away.py`", ["tests/test_renamed_away.py"]),
        ("`test_adyen.py::test_a_resplit_signed_string_never_yields_another_event`", []),
        ("`test_purge.py`, `test_never_written`", ["tests/store/test_purge.py::test_never_written"]),
        ("`benchmarks/hostile.py`; `WEBHOOKS_MAX_ATTEMPTS`, `n = 1`", []),
    ],
)
def test_a_renamed_or_removed_test_is_reported(cell: str, missing: list[str]) -> None:
    assert missing_in(cell) == missing


def test_the_readme_is_a_short_front_page_that_reaches_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    links = set(re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme))
    local = {link for link in links if "://" not in link}
    assert {link for link in local if not (ROOT / link).exists()} == set()
    pages = {str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md")}
    assert pages - local == set()


def test_the_readme_keeps_the_two_quick_start_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    test_command = ci.split("# The README's test command, verbatim:\n", 1)[1].splitlines()[0].strip()
    assert "\nreadme_tests || status=$?\n" in ci  # and .ci/run runs it
    assert f"```sh\n{test_command}\n```" in readme
    assert "```sh\npython3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/webhooks serve\n```" in readme


def _sendgrid_public_key() -> str:
    public = ec.generate_private_key(ec.SECP256R1()).public_key()
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(der).decode()


def examples() -> list[tuple[str, str]]:
    """(page, TOML) for each endpoint example on a provider page and in the README."""
    pages = [*sorted((DOCS / "providers").glob("*.md")), ROOT / "README.md"]
    return [
        (str(p.relative_to(ROOT)), block)
        for p in pages
        for block in re.findall(r"```toml\n(.*?)```", p.read_text(), re.S)
    ]


@pytest.mark.parametrize(("page", "toml"), examples(), ids=[page for page, _ in examples()])
def test_every_endpoint_example_starts(page: str, toml: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A destination's name is looked up at start-up: here by a resolver that knows none (no DNS traffic).
    monkeypatch.setattr(guard, "system_resolver", lambda host, port: [])
    values = {
        "ORDERS_WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "ADYEN_HMAC_KEY": "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056",
        "SENDGRID_WEBHOOK_PUBLIC_KEY": _sendgrid_public_key(),
        "ADYEN_BASIC_AUTH": "user:password",
        "PAYSTACK_SECRET_KEY": "sk_test_5f3ae2e7c0d4b1a9e8f7a6b5c4d3e2f1a0b9c8d7",
        "BRAINTREE_OLD_KEY_PAIR": "old_public:old-private-key",
        "BRAINTREE_WEBHOOK_SECRET": "live_public:live-private-key",
        "MOLLIE_API_KEY": "test_dHar4XY7LxsDOtmnkVtjNVWXLSlXsM",
        "MERCADOPAGO_ACCESS_TOKEN": "TEST-7719417112948541-012318-4f4ee0ce29fd7f3f4f0d3b26e6a2d8c0-724484980",
    }
    environ = {name: values.get(name, f"value-of-{name}") for name in re.findall(r'"env:(\w+)"', toml)}
    path = tmp_path / "webhooks.toml"
    path.write_text(toml.replace("…", "x"))
    settings = config.load({"DATABASE_URL": "sqlite://", "WEBHOOKS_CONFIG": str(path), **environ})
    assert settings.endpoints


def _distribution(requirement: str) -> str:
    name = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name[0]).lower()


def test_the_examples_extra_installs_what_the_examples_import() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    offered = {_distribution(r) for r in [*project["dependencies"], *project["optional-dependencies"]["examples"]]}
    local = {"webhooks", *(p.name for p in (ROOT / "examples").iterdir() if p.is_dir())}
    imported: set[str] = set()
    for path in (ROOT / "examples").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - local - {"__future__"}
    providers = importlib.metadata.packages_distributions()
    needed = {module: {_distribution(d) for d in providers.get(module, [module])} for module in third_party}
    assert {module: dists for module, dists in needed.items() if not dists & offered} == {}
    assert "standardwebhooks" in third_party  # the scan sees the orders example's SDK
    readme = (ROOT / "examples" / "orders" / "README.md").read_text()
    assert "pip install -q '.[examples]'" in readme


# A revision named as the head or the current schema ("head is 0013", "head revision 0013",
# "head 0013", "current schema 0013", "database ready at 0013"), not a historical one
# ("Revision 0009 keeps …").
HEAD_REVISION = re.compile(r"\b(?:head|current schema|ready)(?: revision)?(?: is| at)?[\s:(]*(\d{4})\b", re.I)


def revisions_named_as_head(text: str) -> list[str]:
    return HEAD_REVISION.findall(text)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("database schema never migrated, head is\n0011: run `webhooks db upgrade`", ["0011"]),
        ("*database schema at 0002, head is 0013: run …*; `database at 0013, head 0013`", ["0013", "0013"]),
        ("the head revision (0012) and the current schema: 0012", ["0012", "0012"]),
        ("then, at `info`, *database ready at 0013*", ["0013"]),
        ("**Revision 0009** keeps a body once; revision 0013 adds indexes (head 0013 today)", ["0013"]),
        ("the head revision, whatever it is; 0007 renames a column", []),
    ],
)
def test_a_revision_named_as_the_head_is_found(text: str, named: list[str]) -> None:
    assert revisions_named_as_head(text) == named


def test_every_revision_the_docs_name_as_the_head_is_the_head() -> None:
    from webhooks.tables import revisions

    pages = [ROOT / "README.md", *DOCS.rglob("*.md"), *(ROOT / "examples").rglob("*.md")]
    named = {str(p.relative_to(ROOT)): revisions_named_as_head(p.read_text()) for p in pages}
    assert sum(len(found) for found in named.values()) >= 2  # production.md names it, so the check bites
    head = revisions.head()
    assert {page: found for page, found in named.items() if set(found) - {head}} == {}


def test_the_documented_secret_one_liner_makes_a_secret_a_destination_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guard, "system_resolver", lambda host, port: [])
    for page in (DOCS / "forwarding.md", ROOT / "examples" / "orders" / "README.md"):
        code = re.search(r"python3 -c '([^']+)'", page.read_text())
        assert code, page
        made = subprocess.run([sys.executable, "-c", code[1]], capture_output=True, text=True, check=True, timeout=60)
        secret = made.stdout.strip()
        path = tmp_path / "webhooks.toml"
        path.write_text(f'[destinations.orders]\nurl = "https://orders.example/in"\nsecrets = ["{secret}"]\n')
        settings = config.load({"DATABASE_URL": "sqlite://", "WEBHOOKS_CONFIG": str(path)})
        assert secret.startswith("whsec_") and len(settings.destinations["orders"].keys[0]) == 32


def test_every_test_adding_a_provider_names_exists() -> None:
    page = (DOCS / "adding-a-provider.md").read_text()
    named = [span for span in SPAN.findall(page) if re.fullmatch(r"tests/[\w/]+\.py(?:::\w+)?", span)]
    assert "tests/providers/test_catalogue_complete.py::test_every_kind_has_everything" in named  # the checklist
    assert [gone for span in named for gone in missing_in(f"`{span}`")] == []
