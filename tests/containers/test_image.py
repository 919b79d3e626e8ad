"""The image (#40): its quick start processes a delivery sent from the host; the Procfile's processes
from it process an event on PostgreSQL and Redis; SIGTERM stops the worker within its timeout; a
read-only root filesystem, a non-root user, the labels and the health check hold; no compiler, no
pip, no bus client and no secret inside."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import requests

from tests.conftest import ADMIN_PASSWORD, STRIPE_SECRET, free_port, stripe_event, stripe_headers, wait_until
from tests.containers.conftest import REPORT
from tests.support.podman import ROOT, Podman, wait_http
from tests.support.processes import BIN, clean_env, event_status

MAX_SIZE = 400_000_000  # bytes (#40)
SECRET_WORDS = ("PASSWORD", "SECRET", "TOKEN", "ENCRYPTION_KEYS", "API_KEY")


def processed(base: str, event_id: str, password: str = ADMIN_PASSWORD) -> bool:
    return bool(event_status(base, "stripe", event_id, password) == "processed")


def said(podman: Podman, ident: str, words: str) -> str | None:
    """The container's log once it holds ``words``."""
    text = podman.logs(ident)
    return text if words in text else None


def send(port: int) -> None:
    """``webhooks send`` from the host, as the quick start's user does (the installed command)."""
    payload = ROOT / "tests/payloads/stripe/payment_intent.succeeded__basic.json"
    done = subprocess.run(
        [str(BIN / "webhooks"), "send", "stripe", str(payload), "--url", f"http://127.0.0.1:{port}/webhooks/stripe"],
        env=clean_env(STRIPE_WEBHOOK_SECRET=STRIPE_SECRET), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("200"), done.stdout + done.stderr


def test_the_quick_start_in_the_image_processes_a_delivery_from_the_host(podman: Podman, image: str) -> None:
    volume = f"webhooks-test-data-{uuid.uuid4().hex[:8]}"
    podman("volume", "create", volume)
    podman.made.append(("volume", podman("volume", "inspect", "--format", "{{.Name}}", volume).stdout.strip()))
    port = free_port()
    start = time.monotonic()
    ident = podman.run_detached(
        "--read-only", "--tmpfs", "/tmp", "-p", f"127.0.0.1:{port}:8000", "-v", f"{volume}:/data",
        "-e", f"STRIPE_WEBHOOK_SECRET={STRIPE_SECRET}", image,
    )  # fmt: skip
    wait_http(f"http://127.0.0.1:{port}/healthz")
    REPORT.append(f"quick start: `podman run` to a 200 on /healthz in {time.monotonic() - start:.2f} s")
    send(port)
    banner = wait_until(lambda: said(podman, ident, "  database   "), timeout=60)
    assert "  database   /data/webhooks.db (SQLite)" in banner, banner
    assert "(kept in /data/webhooks.db.admin-password)" in banner
    assert "  keys       encryption key kept in /data/webhooks.db.key" in banner
    password = podman("exec", ident, "cat", "/data/webhooks.db.admin-password").stdout.strip()
    wait_until(lambda: processed(f"http://127.0.0.1:{port}", _event_id(), password), timeout=60)
    # Non-root, and nothing but /data and /tmp is writable.
    assert podman("exec", ident, "id", "-u").stdout.strip() == "10001"
    refused = podman("exec", ident, "sh", "-c", "touch /opt/webhooks/x", check=False)
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    stop = time.monotonic()
    podman("stop", "-t", "30", ident, timeout=60)
    REPORT.append(f"quick start: SIGTERM to exit in {time.monotonic() - stop:.2f} s")
    assert podman.inspect(ident)["State"]["ExitCode"] == 0


def _event_id() -> str:
    body = json.loads((ROOT / "tests/payloads/stripe/payment_intent.succeeded__basic.json").read_text())
    return str(body["id"])


def test_the_image_is_labelled_checked_small_and_holds_nothing_it_need_not(podman: Podman, image: str) -> None:
    found = podman.inspect(image)
    config = found["Config"]
    assert config["User"] == "10001:10001"
    assert config["Cmd"] == ["webhooks", "serve", "--host", "0.0.0.0"]
    assert "8000/tcp" in config["ExposedPorts"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert labels["org.opencontainers.image.licenses"] == "MIT"
    assert labels["org.opencontainers.image.source"].startswith("https://")
    health = found["Healthcheck"]["Test"]  # kept by --format docker (OCI drops it)
    assert health[0] == "CMD" and "/healthz" in " ".join(health)
    assert "/data" in config["Volumes"]
    names = [entry.split("=", 1)[0] for entry in config["Env"]]
    assert not [n for n in names if any(word in n for word in SECRET_WORDS)], names
    assert found["Size"] <= MAX_SIZE, found["Size"]
    probe = (
        "command -v gcc cc pip pip3 || true; "
        'python3 -c \'import importlib.util as u; print([m for m in ("pika", "nats", "boto3", "pytest") if u.find_spec(m)])\'; '
        "ls /opt/webhooks/lib/python3.11/site-packages/webhooks/__pycache__ | grep -c 'cpython-311.pyc'; "
        "find / -xdev \\( -name '*.key' -o -name '*.admin-password' -o -name '*.db' -o -name 'webhooks.toml' \\) -print 2>/dev/null || true"
    )
    out = podman(
        "run", "--rm", "--no-healthcheck", "--read-only", "--user", "0", image, "sh", "-c", probe
    ).stdout.splitlines()
    assert out[0] == "[]", out  # no compiler, no pip, no bus client, no test tool
    assert int(out[1]) > 5, out  # bytecode compiled at build
    assert out[2:] == [], out  # no key, password, database or endpoints file baked in
    sizes = podman("run", "--rm", "--no-healthcheck", image, "sh", "-c",
                   "du -s /opt/webhooks/lib/python3.11/site-packages/* | sort -n | tail -4; du -s /usr/lib/python3.11")  # fmt: skip
    REPORT.append(
        "largest parts (KB): "
        + "; ".join(" ".join(Path(p).name for p in line.split()) for line in sizes.stdout.splitlines())
    )


def test_the_procfile_processes_from_the_image_process_an_event_and_the_worker_stops_on_sigterm(
    podman: Podman, image: str, pg_url: str, redis_url: str
) -> None:
    """Every Procfile line, run by ``sh -c`` in the image (as a platform runs it), against this
    machine's PostgreSQL and Redis (host network: loopback only); the worker's own port answers."""
    lines = dict(line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if ": " in line)
    web_port, worker_port = free_port(), free_port()
    env = {"DATABASE_URL": pg_url, "REDIS_URL": redis_url, "WEBHOOKS_ADMIN_PASSWORD": ADMIN_PASSWORD,
           "STRIPE_WEBHOOK_SECRET": STRIPE_SECRET, "PORT": str(web_port), "WEBHOOKS_WORKER_PORT": str(worker_port),
           "WEBHOOKS_STOP_TIMEOUT": "10", "WEB_CONCURRENCY": "2"}  # fmt: skip
    flags = [
        "--network",
        "host",
        "--read-only",
        "--tmpfs",
        "/tmp",
        *(a for k, v in env.items() for a in ("-e", f"{k}={v}")),
    ]
    release = podman("run", "--rm", "--no-healthcheck", *flags, image, "sh", "-c", lines["release"], timeout=180)
    assert "database at head" in release.stdout, release.stdout + release.stderr
    web = podman.run_detached(*flags, image, "sh", "-c", f"exec {lines['web']}")
    worker = podman.run_detached(*flags, image, "sh", "-c", f"exec {lines['worker']}")
    base = f"http://127.0.0.1:{web_port}"
    wait_http(f"{base}/readyz")
    wait_http(f"http://127.0.0.1:{worker_port}/healthz")
    body = stripe_event("evt_procfile_image")
    assert (
        requests.post(f"{base}/webhooks/stripe", data=body, headers=stripe_headers(body), timeout=30).status_code == 200
    )
    try:
        wait_until(lambda: processed(base, "evt_procfile_image"), timeout=60)
    except AssertionError as exc:  # once seen in a full CI run, never alone: what each process said
        said_by = {"web": podman.logs(web)[-3000:], "worker": podman.logs(worker)[-3000:]}
        raise AssertionError(
            f"{exc}; status {event_status(base, 'stripe', 'evt_procfile_image')!r}; {said_by}"
        ) from None
    metrics = requests.get(f"http://127.0.0.1:{worker_port}/metrics", auth=("admin", ADMIN_PASSWORD), timeout=10)
    assert 'webhooks_processing_attempts_total{endpoint="stripe",outcome="processed"} 1.0' in metrics.text
    start = time.monotonic()
    podman("stop", "-t", "60", worker, timeout=120)  # SIGTERM; SIGKILL only after 60 s
    took = time.monotonic() - start
    REPORT.append(f"Procfile worker: SIGTERM to exit in {took:.2f} s (WEBHOOKS_STOP_TIMEOUT=10)")
    state = podman.inspect(worker)["State"]
    assert state["ExitCode"] == 0 and took < 10 + 5, (state, took, podman.logs(worker)[-2000:])
    podman("stop", "-t", "60", web, timeout=120)
    assert podman.inspect(web)["State"]["ExitCode"] == 0, podman.logs(web)[-2000:]
