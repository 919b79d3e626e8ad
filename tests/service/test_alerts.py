"""The alert rules in ``docs/alerts.yml`` are valid, fire on the series they are meant for
(``promtool test rules``), and name only metrics that ``/metrics`` exports."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from flask import Flask

from tests.conftest import admin_headers

DOCS = Path(__file__).resolve().parents[2] / "docs"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = (
            "promtool not found: it comes with Debian's prometheus package "
            "(`apt-get install --no-install-recommends prometheus`; its service need not run)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message + " — required under CI=true")
        pytest.skip(message)
    return found


@pytest.mark.parametrize("args", [["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]])
def test_promtool_accepts_the_rules(args: list[str]) -> None:
    result = subprocess.run([promtool(), *args], cwd=DOCS, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rules_name_only_exported_metrics(app: Flask) -> None:
    scraped = app.test_client().get("/metrics", headers=admin_headers()).get_data(as_text=True)
    exported = set(re.findall(r"^# TYPE (\w+) (\w+)", scraped, re.M))
    names = {name if kind != "counter" or name.endswith("_total") else name + "_total" for name, kind in exported}
    used = set(re.findall(r"\b(webhooks_[a-z_]+)", (DOCS / "alerts.yml").read_text()))
    assert used and used <= names, used - names
