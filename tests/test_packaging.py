"""The wheel installs one top-level package, ``webhooks``: an application with its own ``jobs``
and ``migrations`` packages keeps them, and registers handlers with ``from webhooks import on``;
in a source checkout the old ``from jobs import on`` is the same registry."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
APP = textwrap.dedent('''
    import json, sys, time
    import jobs, migrations
    assert jobs.APP_JOBS and migrations.APP_MIGRATIONS, "the application's own packages"
    import webhooks
    assert webhooks.__file__.startswith(sys.argv[1]), webhooks.__file__
    from rq import SimpleWorker
    from webhooks import create_app, providers
    from webhooks.cli import upgrade
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
    print("ok")
''')


def test_the_wheel_leaves_jobs_and_migrations_to_the_application(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    wheel = next(wheels.glob("webhooks-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"webhooks", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "webhooks/jobs/process.py" in names and "webhooks/migrations/versions/0001_initial_schema.py" in names
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    app = tmp_path / "app"
    for package, marker in (("jobs", "APP_JOBS = True\n"), ("migrations", "APP_MIGRATIONS = True\n"), ("myapp", "")):
        (app / package).mkdir(parents=True)
        (app / package / "__init__.py").write_text(marker)
    (app / "myapp" / "handlers.py").write_text(
        "from webhooks import on\nSEEN = []\n\n@on('stripe', 'invoice.paid')\n"
        "def paid(event, state):\n    SEEN.append(event.event_id)\n")
    data = tmp_path / "data"
    data.mkdir()
    result = subprocess.run([sys.executable, "-c", APP, str(site), str(data)], cwd=app, capture_output=True,
                            text=True, timeout=300, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok")


def test_the_old_import_is_the_same_registry_in_a_source_checkout() -> None:
    probe = ("import jobs, jobs.handlers, webhooks, webhooks.jobs.handlers as real\n"
             "assert jobs.on is webhooks.on is real.on and jobs.handlers is real\n"
             "assert jobs.HandlerEvent is real.HandlerEvent\nprint('same')")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "same", result.stderr
