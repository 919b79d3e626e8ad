"""compose.yaml (#40), brought up with podman-compose: PostgreSQL and Redis from images made here
from the same Debian base (Debian's postgresql and redis-server, standing in for the registry's,
named through POSTGRES_IMAGE and REDIS_IMAGE), the release step once, web and worker from the image;
an event sent and processed; brought down with its volumes. Health checks never run here (no
systemd): nothing waits on them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests

from tests.conftest import STRIPE_SECRET, free_port, stripe_event, stripe_headers, wait_until
from tests.containers.conftest import REPORT, needed
from tests.support.podman import BASE, ROOT, Podman, wait_http
from tests.support.processes import event_status

POSTGRES = f"""\
FROM {BASE}
RUN apt-get update && apt-get install -y --no-install-recommends postgresql-15 && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p /var/lib/postgresql/data /run/postgresql && chown -R postgres:postgres /var/lib/postgresql /run/postgresql
COPY entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
STOPSIGNAL SIGINT
USER postgres
ENTRYPOINT ["/bin/sh", "/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
"""
# What the registry's postgres image does on its first start: a cluster with POSTGRES_USER,
# POSTGRES_PASSWORD and POSTGRES_DB, password auth from other hosts.
ENTRYPOINT = """\
set -e
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s' "$POSTGRES_PASSWORD" > /tmp/pw
  initdb -D "$PGDATA" -U "${POSTGRES_USER:-postgres}" --encoding=UTF8 --locale=C.UTF-8 --pwfile=/tmp/pw --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm /tmp/pw
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  createdb -U "${POSTGRES_USER:-postgres}" "${POSTGRES_DB:-postgres}" 2>/dev/null || true
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec "$@" -c listen_addresses='*'
"""
REDIS = f"""\
FROM {BASE}
RUN apt-get update && apt-get install -y --no-install-recommends redis-server redis-tools && rm -rf /var/lib/apt/lists/* \\
 && mkdir /data && chown redis:redis /data \\
 && printf '#!/bin/sh\\nexec /usr/bin/redis-server "$@" --protected-mode no --bind 0.0.0.0\\n' > /usr/local/bin/redis-server \\
 && chmod +x /usr/local/bin/redis-server
USER redis
CMD ["redis-server"]
"""


@pytest.fixture(scope="module")
def backing_images(podman: Podman, image: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("backing")
    tags = {}
    for name, containerfile in (("postgres", POSTGRES), ("redis", REDIS)):
        context = work / name
        context.mkdir()
        (context / "Containerfile").write_text(containerfile)
        (context / "entrypoint.sh").write_text(ENTRYPOINT)
        tags[name] = f"localhost/webhooks-test-{name}:{uuid.uuid4().hex[:8]}"
        podman.build(context, tags[name])
    return tags


def test_compose_brings_up_the_service_and_processes_an_event(
    podman: Podman, image: str, backing_images: dict[str, str], tmp_path: Path
) -> None:
    needed("podman")
    project = f"whtest{uuid.uuid4().hex[:8]}"
    port = free_port()
    shutil.copy(ROOT / "compose.yaml", tmp_path / "compose.yaml")
    example = (ROOT / ".env.example").read_text()
    dotenv = (
        example.replace("POSTGRES_PASSWORD=change-me\n", "POSTGRES_PASSWORD=pg-test-pw\n")
        .replace("webhooks:change-me@postgres", "webhooks:pg-test-pw@postgres")
        .replace("WEBHOOKS_ADMIN_PASSWORD=change-me-too", "WEBHOOKS_ADMIN_PASSWORD=admin-test-pw")
        .replace("STRIPE_WEBHOOK_SECRET=\n", f"STRIPE_WEBHOOK_SECRET={STRIPE_SECRET}\n")
    )
    (tmp_path / ".env").write_text(
        dotenv + f"IMAGE={image}\nPOSTGRES_IMAGE={backing_images['postgres']}\n"
        f"REDIS_IMAGE={backing_images['redis']}\nHOST_PORT={port}\n"
    )
    compose = [sys.executable, "-m", "podman_compose", "-p", project, "-f", str(tmp_path / "compose.yaml")]
    containers_before, volumes_before = podman.ids("container"), podman.ids("volume")
    try:
        up = subprocess.run([*compose, "up", "-d", "--no-build"], cwd=tmp_path, env=podman.env,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        base = f"http://127.0.0.1:{port}"
        took = wait_http(f"{base}/readyz", timeout=120)
        REPORT.append(f"compose: up to a ready web in {took:.1f} s after `up -d` returned")
        body = stripe_event("evt_compose")
        answer = requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=30)
        assert answer.status_code == 200, answer.text

        wait_until(lambda: event_status(base, "stripe", "evt_compose", "admin-test-pw") == "processed", timeout=90)
        states = {
            name: podman(
                "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", f"{project}_{name}_1"
            ).stdout.strip()
            for name in ("release", "web", "worker", "postgres", "redis")
        }
        assert states["release"] == "exited 0" and states["web"].startswith("running"), states
        assert states["worker"].startswith("running"), states
    finally:
        down = subprocess.run([*compose, "down", "-v"], cwd=tmp_path, env=podman.env, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        # Whatever compose left, by id.
        podman.made += [("container", c) for c in sorted(podman.ids("container") - containers_before)]
        podman.made += [("volume", v) for v in sorted(podman.ids("volume") - volumes_before)]
        network = f"{project}_default"
        if podman("network", "exists", network, check=False).returncode == 0:
            podman("network", "rm", "-f", network, check=False)
    assert down.returncode == 0, down.stderr[-2000:]
