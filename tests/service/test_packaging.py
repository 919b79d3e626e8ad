"""The wheel installs one top-level package, ``webhooks``: the checkout's top-level ``jobs/`` and
``migrations/`` become ``webhooks.jobs`` and ``webhooks.migrations`` (pyproject's package-dir, no
links), an application with its own ``jobs`` and ``migrations`` packages keeps them, and registers
handlers with ``from webhooks import on``. An editable install maps the same names."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
APP = textwrap.dedent("""
    import json, sys, time
    import jobs, migrations
    assert jobs.APP_JOBS and migrations.APP_MIGRATIONS, "the application's own packages"
    import webhooks, webhooks.jobs.worker, webhooks.jobs.process, webhooks.migrations
    for module in (webhooks, webhooks.jobs.worker, webhooks.jobs.process, webhooks.migrations):
        assert module.__file__.startswith(sys.argv[1]), module.__file__
    assert webhooks.jobs.worker.Worker.__module__ == "webhooks.worker.loop"
    from rq import SimpleWorker
    from webhooks import create_app, providers
    from webhooks.service.cli import upgrade
    url = f"sqlite:///{sys.argv[2]}/wh.db"
    upgrade(url)
    app = create_app({"DATABASE_URL": url, "WEBHOOKS_HANDLERS": "myapp.handlers", "WEBHOOKS_EMBEDDED_WORKER": "false",
                      "ENDPOINTS": {"stripe": {"provider": "stripe", "secrets": ["whsec_pkg"]}}})
    rt = app.extensions["webhooks"]
    body = json.dumps({"id": "evt_pkg", "object": "event", "created": int(time.time()), "type": "invoice.paid",
                       "data": {"object": {"id": "in_1", "object": "invoice"}}}).encode()
    body, headers = providers.get("stripe").sign(rt.settings.endpoints["stripe"], body, now=time.time())
    assert app.test_client().post("/webhooks/stripe", data=body, headers=headers).status_code == 200
    rt.bind()
    SimpleWorker([rt.queue.queue], connection=rt.queue.connection).work(burst=True)
    import myapp.handlers
    assert myapp.handlers.SEEN == ["evt_pkg"], myapp.handlers.SEEN
    assert sys.modules["jobs"].APP_JOBS
    from webhooks.testing import catalogue
    assert str(catalogue.payload_dir()).startswith(sys.argv[1]) and len(catalogue.payload_names()) > 70
    assert json.loads(catalogue.payload("payment_intent.succeeded__basic", "stripe"))["object"] == "event"
    print("ok")
""")


def test_the_wheel_leaves_jobs_and_migrations_to_the_application(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(wheels.glob("webhooks-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"webhooks", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "webhooks/jobs/process.py" in names and "webhooks/migrations/versions/0001_initial_schema.py" in names
    # webhooks.testing offers the suite's payloads by name: a wheel has no tests/, so they ship in it.
    payloads = {
        f"webhooks/testing/payloads/{p.relative_to(ROOT / 'tests' / 'payloads')}"
        for p in (ROOT / "tests" / "payloads").rglob("*")
        if p.is_file()
    }
    assert len(payloads) > 70 and payloads <= set(names), sorted(payloads - set(names))[:5]
    assert "webhooks/migrations/script.py.mako" in names
    # Every module of the checkout is in the wheel (a subpackage missing from pyproject's list is not).
    checkout = {f"webhooks/{p.relative_to(ROOT / 'webhooks')}" for p in (ROOT / "webhooks").rglob("*.py")}
    checkout |= {
        f"webhooks/{p.relative_to(ROOT)}" for top in ("jobs", "migrations") for p in (ROOT / top).rglob("*.py")
    }
    assert checkout - set(names) == set()
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    app = tmp_path / "app"
    for package, marker in (("jobs", "APP_JOBS = True\n"), ("migrations", "APP_MIGRATIONS = True\n"), ("myapp", "")):
        (app / package).mkdir(parents=True)
        (app / package / "__init__.py").write_text(marker)
    (app / "myapp" / "handlers.py").write_text(
        "from webhooks import on\nSEEN = []\n\n@on('stripe', 'invoice.paid')\n"
        "def paid(event, state):\n    SEEN.append(event.event_id)\n"
    )
    data = tmp_path / "data"
    data.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", APP, str(site), str(data)],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok")
    cli = subprocess.run(
        [sys.executable, "-m", "webhooks", "db", "upgrade"],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "DATABASE_URL": f"sqlite:///{data}/cli.db"},
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert (data / "cli.db").exists()


def test_the_editable_install_maps_the_checkouts_jobs_and_migrations(tmp_path: Path) -> None:
    probe = (
        "import json, webhooks.jobs.worker, webhooks.jobs.process, webhooks.migrations, webhooks.worker.loop\n"
        "from webhooks.tables.revisions import migrations_dir\n"
        "assert webhooks.jobs.worker.Worker is webhooks.worker.loop.Worker\n"
        "print(json.dumps([webhooks.jobs.process.__file__, webhooks.migrations.__file__, str(migrations_dir())]))"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        str(ROOT / "jobs" / "process.py"),
        str(ROOT / "migrations" / "__init__.py"),
        str(ROOT / "migrations"),
    ]
