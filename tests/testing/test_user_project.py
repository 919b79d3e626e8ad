"""``webhooks.testing`` as an application developer meets it: a project of their own, run by pytest
in a process of its own (pytester), where the plugin arrives through its entry point. The example
is docs/handlers.md's "Testing your handlers", verbatim: its fenced blocks whose first line names
a file (``# myapp/handlers.py``) are the project's files."""

from __future__ import annotations

import re
import textwrap

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
SECTION = "## Testing your handlers"


def documented_project() -> dict[str, str]:
    """docs/handlers.md's example: file path → its text."""
    text = (ROOT / "docs" / "handlers.md").read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.find("\n## ", len(SECTION))] if "\n## " in section[len(SECTION) :] else section
    files = {}
    for block in re.findall(r"```(?:python|ini)\n(.*?)```", section, flags=re.S):
        first, _, _ = block.partition("\n")
        if re.fullmatch(r"# [\w/]+\.(py|ini)", first.strip()):
            files[first[2:].strip()] = block
    return files


def test_the_documented_example_passes_as_a_project_of_its_own(pytester: pytest.Pytester) -> None:
    files = documented_project()
    assert set(files) == {"pytest.ini", "myapp/__init__.py", "myapp/handlers.py", "test_handlers.py"}
    for path, text in files.items():
        target = pytester.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_handlers.py")
    result.assert_outcomes(passed=2)


def test_the_plugin_is_on_and_costs_nothing_until_asked(pytester: pytest.Pytester) -> None:
    """Installed, the plugin loads in every run; a suite that never asks for its fixtures imports
    no web framework and none of its machinery; one that asks without naming handlers is told how."""
    pytester.makepyfile(
        test_plain=textwrap.dedent("""
            import sys

            def test_plain(request):
                assert request.config.pluginmanager.has_plugin("webhooks")
                assert "webhooks.testing.plugin" in sys.modules
                loaded = {"flask", "sqlalchemy", "cryptography", "webhooks.testing.harness"} & set(sys.modules)
                assert not loaded, loaded
        """),
        test_asks=textwrap.dedent("""
            def test_asks(webhook_client):
                pass
        """),
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_plain.py")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_asks.py")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no handlers to test; set `webhooks_handlers = myapp.handlers`*"])
