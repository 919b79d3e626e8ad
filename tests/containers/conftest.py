"""The deployment tests (#40), run by ``pytest --containers tests/containers`` (.ci/run, after the
README's test command): the image, compose and the chart, built and run under podman here.

One image for the session, built from the repository's Dockerfile on a Debian base made here; every
container, pod, volume, secret and image a test makes is removed by id at the end. Without podman a
developer's run skips them with the reason; under ``CI=true`` they fail instead.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.support.podman import BASE, ROOT, Podman, make_base, wheelhouse

REPORT: list[str] = []  # measured figures, printed at the end of the run


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/containers/" in item.nodeid:
            item.add_marker(pytest.mark.slow)  # they start processes; only ever run with --containers


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORT:
        terminalreporter.section("containers: measured")
        for line in REPORT:
            terminalreporter.write_line(line)


def needed(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if not missing:
        return
    reason = f"{', '.join(missing)} not installed: apt-get install podman runc catatonit debootstrap"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (required under CI=true; .ci/run installs them)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    needed("podman", "runc", "debootstrap")
    tool = Podman(tmp_path_factory.mktemp("podman"))
    yield tool
    left = tool.remove()
    assert not left, "left behind:\n" + "\n".join(left)


@pytest.fixture(scope="session")
def image(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The repository's Dockerfile built unchanged (on the base made here), offline from a wheelhouse."""
    work = tmp_path_factory.mktemp("image")
    start = time.monotonic()
    make_base(podman, work)
    based = time.monotonic()
    house = wheelhouse(work)
    tag = f"localhost/webhooks-test:{uuid.uuid4().hex[:8]}"
    podman.build(ROOT, tag, "-v", f"{house}:/wheelhouse:ro")
    built = time.monotonic()
    size = int(podman("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())
    base_size = int(podman("image", "inspect", "--format", "{{.Size}}", BASE).stdout.strip())
    REPORT.append(f"base {BASE}: {base_size / 1e6:.0f} MB, ready in {based - start:.1f} s")
    REPORT.append(f"image {tag}: {size / 1e6:.0f} MB, wheelhouse and build {built - based:.1f} s")
    return tag
