"""Slow senders: genuine delivery latency while 0, 100 and 200 connections drip their request (half
the head, half the body, a byte each every 0.5 s), on the Procfile's gunicorn defaults, in one run.

Each case starts a fresh gunicorn (``-c python:webhooks.service.gunicorn_conf``, SQLite, embedded queue),
opens the drippers, waits until each has dripped a few bytes, then sends ``--deliveries`` signed
Stripe deliveries one after another, each on a new connection with a 10 s client timeout, while the
drippers are still held (inside their 10 s head deadline). The "old" rows are the settings before
(stock gthread, 4 threads): there a delivery is not answered until the drippers stop. Also shown:
the resident memory of the web workers (their threads are started only when needed).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from common import BIN, ROOT, base_env, free_port, process, signed, workdir

sys.path.insert(0, str(ROOT))
from tests.support.drippers import Drippers  # after the path that finds it

OLD = ["--worker-class", "gthread", "--threads", "4"]


def deliver(port: int, n: int) -> float | None:
    """Seconds until a genuine delivery is answered 200; ``None`` if not within 10 s."""
    header, body = signed(f"evt_slow_{n}_{time.monotonic_ns()}", int(time.time()), n)
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/webhooks/stripe",
        data=body.encode(),
        method="POST",
        headers={"Stripe-Signature": header, "Content-Type": "application/json"},
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return time.monotonic() - started if resp.status == 200 else None
    except (urllib.error.URLError, TimeoutError):
        return None


def rss_mb(pid: int) -> float:
    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    total = 0
    for kid in kids:
        for line in Path(f"/proc/{kid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def case(work: Path, name: str, drippers: int, deliveries: int, extra: list[str]) -> dict[str, object]:
    db = work / f"{name}-{drippers}.db"
    env = base_env(work, DATABASE_URL=f"sqlite:///{db}", PORT="0")
    env.pop("WEB_THREADS")  # the Procfile's default
    subprocess.run([sys.executable, "-m", "webhooks", "db", "upgrade"], env=env, check=True, capture_output=True)
    port = free_port()
    cmd = [
        str(BIN / "gunicorn"),
        "webhooks:create_app()",
        "-c",
        "python:webhooks.gunicorn_conf",
        "--bind",
        f"127.0.0.1:{port}",
        "--no-control-socket",
        *extra,
    ]
    with process(cmd, env, work, up=f"http://127.0.0.1:{port}/healthz") as proc:
        held = [Drippers(port, drippers // 2, "head"), Drippers(port, drippers - drippers // 2, "body")]
        try:
            deadline = time.monotonic() + 60
            while not all(d.dripping(3) for d in held) and time.monotonic() < deadline:
                time.sleep(0.05)
            latencies = [deliver(port, n) for n in range(deliveries)]
            still = sum(d.still_open() for d in held)
            memory = rss_mb(proc.pid)
        finally:
            for d in held:
                d.close()
    answered = [x for x in latencies if x is not None]
    return {
        "settings": name,
        "drippers": drippers,
        "held at end": still,
        "answered": f"{len(answered)}/{deliveries}",
        "p50 ms": round(statistics.median(answered) * 1000, 1) if answered else "-",
        "max ms": round(max(answered) * 1000, 1) if answered else "-",
        "workers RSS MB": round(memory),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=20)
    parser.add_argument("--old", action="store_true", help="also the settings before (gthread, 4 threads)")
    args = parser.parse_args()
    work = workdir()
    rows = [case(work, "Procfile", n, args.deliveries, []) for n in (0, 100, 200)]
    if args.old:
        rows += [case(work, "old", n, 3, OLD) for n in (0, 100)]  # 3: each unanswered one waits 10 s
    keys = list(rows[0])
    print(" | ".join(keys))
    for row in rows:
        print(" | ".join(str(row[k]) for k in keys))


if __name__ == "__main__":
    main()
