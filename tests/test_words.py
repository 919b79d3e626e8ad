"""The status words and reason codes are one vocabulary each (``webhooks.words``), unchanged as strings."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import webhooks
from webhooks.errors import PayloadError, VerificationError
from webhooks.models import STATUSES
from webhooks.words import Reason, Status

ROOT = Path(webhooks.__file__).parent


def test_the_status_words_are_the_six_of_the_contract() -> None:
    assert STATUSES == ("received", "queued", "processing", "processed", "failed", "ignored")
    assert [s.value for s in Status] == list(STATUSES)
    assert f"{Status.QUEUED}" == str(Status.QUEUED) == "queued"


def test_every_reason_code_raised_in_the_package_is_a_reason() -> None:
    raised = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "VerificationError"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                raised.add(node.args[0].value)
    assert {"signature_mismatch", "unknown_endpoint", "payload_too_large"} <= raised  # the walk sees them
    assert raised <= {r.value for r in Reason}


def test_a_verification_error_carries_a_reason_and_refuses_an_unknown_code() -> None:
    error = VerificationError("url_mismatch", "not PayPal")
    assert error.reason is Reason.URL_MISMATCH and str(error) == "url_mismatch: not PayPal"
    assert PayloadError("no JSON").reason == "malformed_payload"
    with pytest.raises(ValueError):
        VerificationError("signature_mismatchh")
