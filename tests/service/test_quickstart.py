"""The README's quick start, as a new user runs it: a copy of the tree, a non-editable install
(``pip install .``), ``webhooks serve`` started **from the copy's root** (where a ``webhooks/``
without ``jobs/`` sits first on ``python -m``'s path), one ``webhooks send stripe …``, and the
event ``processed``. No network: the wheel is built once without build isolation and installed
without dependencies into a venv that reuses this venv's packages; no ``PYTHONPATH`` (pointing at
the checkout, it would hide the bug). Then ``/metrics`` of that same ``serve``: the web processes'
receiver counters, summed over every process that wrote them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT, free_port, stripe_headers, wait_until
from tests.service.test_serve_processes import children

pytestmark = pytest.mark.slow
SECRET = "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXR0ZXN0c2VjcmV0"
PASSWORD = "quickstart-admin-password"
# What a clone has that the copy leaves out: history, virtualenvs, a developer's databases and
# configuration, caches and build output.
IGNORED = shutil.ignore_patterns(
    ".git", ".venv*", "venv", "__pycache__", "*.db", "*.db-*", "*.admin-password", "webhooks.toml", "build",
    "*.egg-info", "site", ".pytest_cache", ".mypy_cache", ".ruff_cache", "node_modules",
)  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(the clone's root, the bin directory of a venv where it is installed as ``pip install .`` does)."""
    base = tmp_path_factory.mktemp("quickstart")
    clone = base / "clone"
    shutil.copytree(ROOT, clone, ignore=IGNORED)
    wheels = base / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), "."]
    subprocess.run(build, cwd=clone, check=True, env=_plain_env(), timeout=600)
    shutil.rmtree(clone / "build", ignore_errors=True)  # what setuptools left: a clone has none
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    wheel = next(wheels.glob("webhooks-*.whl"))
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)]
    subprocess.run(install, check=True, env=_plain_env(), timeout=600)
    # This venv's packages as dependencies: a .pth line adds the directory without running its
    # own .pth files, so the editable install of the checkout stays out.
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    yield clone, venv / "bin"


def _plain_env(**extra: str) -> dict[str, str]:
    """A new user's shell: no PYTHONPATH, none of the service's variables."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(extra)
    return env


def test_the_quick_start_from_the_clone_root_processes_an_event(installed: tuple[Path, Path], tmp_path: Path) -> None:
    clone, bin_dir = installed
    port = free_port()
    env = _plain_env(
        STRIPE_WEBHOOK_SECRET=SECRET,
        PORT=str(port),
        WEBHOOKS_ADMIN_PASSWORD=PASSWORD,
        WEB_CONCURRENCY="2",
        # No PROMETHEUS_MULTIPROC_DIR, as in the README (set, it would hide #29's 1b: serve must
        # set it before prometheus_client is imported); its default directory goes under TMPDIR.
        TMPDIR=str(tmp_path),
    )
    # The installed package, not the clone's webhooks/ (which has no jobs/), in every process.
    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import webhooks.jobs.process as p; print(p.__file__)"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.returncode == 0 and not where.stdout.startswith(str(clone)), where.stdout + where.stderr
    serve = subprocess.Popen(
        [str(bin_dir / "webhooks"), "serve"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(base + "/healthz"), timeout=120)
        payload = clone / "tests" / "payloads" / "stripe" / "payment_intent.succeeded__basic.json"
        sent = subprocess.run(
            [str(bin_dir / "webhooks"), "send", "stripe", str(payload)],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert sent.returncode == 0 and sent.stdout.startswith("200"), sent.stdout + sent.stderr
        event_id = _event_id(payload)

        assert wait_until(lambda: _finished(base, event_id), timeout=60) == "processed"
        assert (clone / "webhooks.db").exists()  # the embedded default, in the working directory

        # /metrics of this serve: a duplicate and a bad signature beside the stored delivery, each
        # counted once whichever web process answered it; every web process writes its own file.
        body = payload.read_bytes()
        duplicate = requests.post(f"{base}/webhooks/stripe", data=body, headers=_signed(body), timeout=30)
        assert duplicate.status_code == 200
        bad = stripe_headers(body, secret="whsec_" + "d3Jvbmd3cm9uZ3dyb25nd3Jvbmd3cm9uZw==")  # another secret
        assert requests.post(f"{base}/webhooks/stripe", data=body, headers=bad, timeout=30).status_code == 400

        # Two web processes answered these (a process writes its multiprocess file with its first
        # sample, so which files exist depends on which process took which request): the scrape
        # below must add up all of them, whichever process answers it.
        wait_until(lambda: len([p for p in children(serve.pid) if "serve-worker" not in _command(p)]) == 2)

        samples = wait_until(lambda: _counted(base), timeout=30)
        assert samples[("webhooks_deliveries_total", "stored")] == 1
        assert samples[("webhooks_deliveries_total", "duplicate")] == 1
        assert samples[("webhooks_deliveries_total", "rejected")] == 1
        assert samples[("webhooks_rejections_total", "signature_mismatch")] == 1
        assert samples[("webhooks_processing_attempts_total", "processed")] == 1
    finally:
        output = _stopped(serve)
    assert "has no attribute 'jobs" not in output, output[-3000:]


def _counted(base: str) -> dict[tuple[str, str], float] | None:
    """The scrape once it holds the stored, duplicate and rejected deliveries and the rejection."""
    got = _scrape(base)
    wanted = [
        ("webhooks_deliveries_total", "stored"),
        ("webhooks_deliveries_total", "duplicate"),
        ("webhooks_deliveries_total", "rejected"),
        ("webhooks_rejections_total", "signature_mismatch"),
    ]
    return got if all(got.get(key) for key in wanted) else None


def _finished(base: str, event_id: str) -> str | None:
    """The event's status once it is processed or failed (the console's API), else None."""
    answer = requests.get(f"{base}/admin/api/events/stripe/{event_id}", auth=("admin", PASSWORD), timeout=30)
    found = answer.json().get("status") if answer.status_code == 200 else None
    return found if found in ("processed", "failed") else None


def _stopped(proc: subprocess.Popen[str]) -> str:
    """Stop ``proc`` (SIGTERM, then SIGKILL after 30 s) and return what it printed."""
    proc.terminate()
    try:
        output, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
    return output


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


def _event_id(payload: Path) -> str:
    import json

    return str(json.loads(payload.read_bytes())["id"])


def _signed(body: bytes) -> dict[str, str]:
    return stripe_headers(body, secret=SECRET)


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _scrape(base: str) -> dict[tuple[str, str], float]:
    """Each stripe sample by (name, its outcome or reason label)."""
    answer = requests.get(f"{base}/metrics", auth=("admin", PASSWORD), timeout=30)
    assert answer.status_code == 200, answer.text
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            if sample.labels.get("endpoint") == "stripe":
                label = sample.labels.get("outcome") or sample.labels.get("reason") or ""
                found[(sample.name, label)] = sample.value
    return found


def test_the_procfile_web_from_the_clone_root_runs_the_installed_package(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    """gunicorn puts its ``chdir`` (the clone's root) first on ``sys.path`` before it imports
    ``python:webhooks.service.gunicorn_conf``: the clone's ``webhooks/`` gives way to the installed one, so
    the web process's own embedded worker (no ``REDIS_URL``) imports its jobs."""
    clone, bin_dir = installed
    port = free_port()
    database = tmp_path / "procfile.db"
    env = _plain_env(
        STRIPE_WEBHOOK_SECRET=SECRET,
        DATABASE_URL=f"sqlite:///{database}",
        WEBHOOKS_ADMIN_PASSWORD=PASSWORD,
        WEB_CONCURRENCY="2",
        WEB_THREADS="8",
        TMPDIR=str(tmp_path),  # no PROMETHEUS_MULTIPROC_DIR: the master's default directory, under TMPDIR
    )
    release = subprocess.run(
        [str(bin_dir / "webhooks"), "db", "upgrade"], cwd=clone, env=env, capture_output=True, text=True, timeout=300
    )
    assert release.returncode == 0, release.stdout + release.stderr
    web = [str(bin_dir / "python"), "-m", "gunicorn", "webhooks:create_app()", "-c", "python:webhooks.gunicorn_conf"]
    proc = subprocess.Popen(
        [*web, "--bind", f"127.0.0.1:{port}"],
        cwd=clone,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _answers(base + "/healthz"), timeout=120)
        payload = clone / "tests" / "payloads" / "stripe" / "charge.refunded__partial.json"
        body = payload.read_bytes()
        assert requests.post(f"{base}/webhooks/stripe", data=body, headers=_signed(body), timeout=30).status_code == 200
        event_id = _event_id(payload)

        assert wait_until(lambda: _finished(base, event_id), timeout=60) == "processed"

        # The Procfile's web processes' receiver counters, summed whichever process answered.
        assert requests.post(f"{base}/webhooks/stripe", data=body, headers=_signed(body), timeout=30).status_code == 200
        bad = stripe_headers(body, secret="whsec_" + "d3Jvbmd3cm9uZ3dyb25nd3Jvbmd3cm9uZw==")  # another secret
        assert requests.post(f"{base}/webhooks/stripe", data=body, headers=bad, timeout=30).status_code == 400
        samples = wait_until(lambda: _counted(base), timeout=30)
        assert samples[("webhooks_deliveries_total", "stored")] == 1
        assert samples[("webhooks_deliveries_total", "duplicate")] == 1
        assert samples[("webhooks_deliveries_total", "rejected")] == 1
        assert samples[("webhooks_rejections_total", "signature_mismatch")] == 1
    finally:
        output = _stopped(proc)
    assert "has no attribute 'jobs" not in output, output[-3000:]
