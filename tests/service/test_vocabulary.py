"""The status words and reason codes are one vocabulary each (``webhooks.vocabulary``), unchanged as strings."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import webhooks
from webhooks.errors import PayloadError, VerificationError
from webhooks.tables.events import STATUSES
from webhooks.vocabulary import Reason, Status

ROOT = Path(webhooks.__file__).parent
CHECKOUT = ROOT.parent  # ``jobs/`` (installed as ``webhooks.jobs``) is beside ``webhooks/``


def test_the_status_words_are_the_six_of_the_contract() -> None:
    assert STATUSES == ("received", "queued", "processing", "processed", "failed", "ignored")
    assert [s.value for s in Status] == list(STATUSES)
    assert f"{Status.QUEUED}" == str(Status.QUEUED) == "queued"


def test_every_reason_code_raised_in_the_package_is_a_reason() -> None:
    raised = set()
    for path in [*ROOT.rglob("*.py"), *(CHECKOUT / "jobs").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "VerificationError"
                and node.args
            ):
                code = node.args[0]
                if isinstance(code, ast.Constant):
                    raised.add(code.value)
                elif isinstance(code, ast.Attribute) and ast.unparse(code.value) == "Reason":
                    raised.add(getattr(Reason, code.attr).value)  # an unknown member: AttributeError
    assert {"signature_mismatch", "unknown_endpoint", "payload_too_large"} <= raised  # the walk sees them
    assert raised <= {r.value for r in Reason}


# Where events are stored, processed and counted, and where deliveries are refused, a status word
# or reason code is spelled through its enum, never as a bare string (a typo would be a new word).
SPELLED = [
    "jobs/process.py",
    "jobs/objects.py",
    "receiver/receive.py",
    "receiver/batch.py",
    "metrics.py",
    "service/collector.py",
    "worker/claims.py",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "forward").glob("*.py")),
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "store").glob("*.py")),
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "providers").glob("*.py")),
]
# The same strings meaning something else: Stripe's event-type suffixes (``invoice.payment.failed``).
NOT_OURS = {("providers/stripe.py", "failed")}


def source(module: str) -> Path:
    """A ``SPELLED`` module's file: ``jobs/…`` in the checkout's ``jobs/``, the rest in ``webhooks/``."""
    return CHECKOUT / module if module.startswith("jobs/") else ROOT / module


def bare_words(module: str, source: str) -> list[tuple[str, int, str]]:
    """(module, line, word) for each string constant of the code (docstrings aside) that is a
    status word or a reason code."""
    words = {s.value for s in Status} | {r.value for r in Reason}
    tree = ast.parse(source)
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return sorted(
        (module, node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in words
        and id(node) not in docstrings
        and (module, node.value) not in NOT_OURS
    )


def test_statuses_and_reasons_are_spelled_through_their_enums() -> None:
    assert len(SPELLED) > 10 and all(source(m).is_file() for m in SPELLED)
    found = [hit for m in SPELLED for hit in bare_words(m, source(m).read_text(encoding="utf-8"))]
    assert found == []


def test_a_bare_status_or_reason_literal_is_found() -> None:
    source = '''"""A docstring may say queued."""
status = Status.QUEUED
stmt = update(Event).where(Event.status == "processing").values(status="failed")
raise VerificationError("payload_too_large", status=413)
'''
    assert bare_words("receive.py", source) == [
        ("receive.py", 3, "failed"),
        ("receive.py", 3, "processing"),
        ("receive.py", 4, "payload_too_large"),
    ]
    assert bare_words("providers/stripe.py", 'TERMINAL = ("paid", "failed")') == []


def test_a_verification_error_carries_a_reason_and_refuses_an_unknown_code() -> None:
    error = VerificationError("url_mismatch", "not PayPal")
    assert error.reason is Reason.URL_MISMATCH and str(error) == "url_mismatch: not PayPal"
    assert PayloadError("no JSON").reason == "malformed_payload"
    with pytest.raises(ValueError):
        VerificationError("signature_mismatchh")
