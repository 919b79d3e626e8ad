"""The chart's web and worker Deployments run (#40): rendered with Helm as a library, played by
``podman kube play`` (a smoke test, not a cluster: it runs no Job and no hook, ignores Services and
does not enforce probes), on this machine's PostgreSQL and Redis, with the Secret supplied as a
podman secret; the migration Job's own command is run first, as the pre-install hook would."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import helm_python as helm
import requests
import yaml

from tests.conftest import ADMIN_PASSWORD, STRIPE_SECRET, free_port, stripe_event, stripe_headers, wait_until
from tests.containers.conftest import REPORT
from tests.support.podman import ROOT, Podman, wait_http
from tests.support.processes import event_status


def render(values: dict[str, Any], release: str) -> dict[str, list[dict[str, Any]]]:
    chart = helm.Chart.load(ROOT / "deploy/helm/webhooks")
    out = chart.render(values, name=release, namespace="default", is_install=True)
    return {
        Path(name).stem: [d for d in yaml.safe_load_all(text) if d]
        for name, text in out.items()
        if name.endswith(".yaml")
    }


def test_the_charts_web_and_worker_run_and_process_an_event(
    podman: Podman, image: str, pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:8]
    # A release name of the run's own: podman names pods and containers after it, and a pod a killed
    # earlier run left behind under a fixed name made `kube play` fail ("pod already exists").
    release, secret = f"kp{run}", f"webhooks-test-{run}"
    web_port, worker_port = free_port(), free_port()
    repository, tag = image.rsplit(":", 1)
    docs = render({
        "existingSecret": secret,
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "web": {"replicas": 1, "port": web_port, "concurrency": 1},
        "worker": {"replicas": 1, "port": worker_port},
    }, release)  # fmt: skip
    values = {"DATABASE_URL": pg_url, "REDIS_URL": redis_url, "WEBHOOKS_ADMIN_PASSWORD": ADMIN_PASSWORD,
              "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET}  # fmt: skip
    # podman reads a secret named by envFrom/secretKeyRef as JSON: each key's value base64-encoded.
    (tmp_path / "secret.json").write_text(
        json.dumps({k: base64.b64encode(v.encode()).decode() for k, v in values.items()})
    )
    podman("secret", "create", secret, str(tmp_path / "secret.json"))
    podman.made.append(("secret", secret))

    # The pre-install hook's Job, by hand: its container's command, in the image, with the Secret.
    [job] = docs["migration"]
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    env = [a for k, v in values.items() for a in ("-e", f"{k}={v}")]
    done = podman("run", "--rm", "--no-healthcheck", "--network", "host", "--read-only", "--tmpfs", "/tmp", *env,
                  image, *command, timeout=180)  # fmt: skip
    assert "database at head" in done.stdout, done.stdout + done.stderr

    # Host networking reaches this machine's servers on loopback only; podman then refuses the
    # containers' port declarations (Kubernetes does not publish them: they only name the ports).
    deployments = [*docs["web"], *docs["worker"]]
    for deployment in deployments:
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            container.pop("ports")
    (tmp_path / "kube.yaml").write_text(yaml.safe_dump_all(deployments))
    pods = podman.ids("pod")
    try:
        podman("kube", "play", "--network", "host", str(tmp_path / "kube.yaml"), timeout=180)
    finally:
        podman.made += [("pod", p) for p in sorted(podman.ids("pod") - pods)]
    base = f"http://127.0.0.1:{web_port}"
    took = wait_http(f"{base}/readyz/receiving", timeout=90)
    REPORT.append(f"chart under podman kube play: web ready {took:.1f} s after kube play returned")
    wait_http(f"http://127.0.0.1:{worker_port}/healthz")
    worker = requests.get(f"http://127.0.0.1:{worker_port}/healthz", timeout=10).json()
    assert worker["status"] == "ok" and worker["process"] == "worker"
    body = stripe_event("evt_chart_pods")
    assert (
        requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=30).status_code == 200
    )

    wait_until(lambda: event_status(base, "stripe", "evt_chart_pods") == "processed", timeout=60)
    names = podman("ps", "--format", "{{.Names}}").stdout.split()
    web_container = next(c for c in names if c.startswith(release) and c.endswith("-web"))
    shown = podman.inspect(web_container)
    assert shown["HostConfig"]["ReadonlyRootfs"] is True
    assert podman("exec", web_container, "id", "-u").stdout.strip() == "10001"
