"""Where a first delivery's time goes: py-spy samples one gunicorn worker under wrk load.

    .venv/bin/python benchmarks/pyspy.py [--seconds 10] [--connections 16] [--case new|dup]

One gunicorn process (WEB_CONCURRENCY=1, the Procfile's threads) on a fresh PostgreSQL database and
Redis; py-spy (pip, installed when missing) records its threads while wrk posts. Prints the share
of samples spent inside the receiver's steps (inclusive, all threads that were not idle) and the
functions with the most samples of their own; ``--raw`` keeps py-spy's collapsed stacks.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
from pathlib import Path

from common import (  # the script's folder is on sys.path
    BIN,
    REDIS,
    base_env,
    ensure_tools,
    free_port,
    gunicorn,
    lua_script,
    prime,
    scratch_database,
    signed_events,
    workdir,
    wrk,
)

# Frames (function name, file suffix) whose inclusive share is reported, in request order.
STEPS = [  # (function, the file it is in): the receiver's steps, where they live since the moves
    ("read_body", "webhooks/receiver/receive.py"),
    ("verify", "webhooks/receiver/receive.py"),
    ("deliver", "webhooks/receiver/receive.py"),
    ("_account", "webhooks/receiver/receive.py"),
    ("store", "webhooks/receiver/batch.py"),
    ("_commit", "webhooks/receiver/batch.py"),
    ("_enqueue", "webhooks/receiver/batch.py"),
]
IDLE = (
    "wait (threading.py",
    "select (selectors.py",
    "poll (selectors.py",
    "accept (",
    "_wait_for_tstate_lock",
    "sleep (",
    "get (queue.py",
)


def _name(frame: str) -> str:
    """``Class.method (path:line)`` → ``method``."""
    return frame.split(" (")[0].rsplit(".", 1)[-1]


def summarize(raw: Path) -> str:
    busy: list[tuple[list[str], int]] = []
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if frames and any(idle in frames[-1] for idle in IDLE):
            continue
        busy.append((frames, int(count)))
    total = sum(c for _, c in busy) or 1
    lines = [f"busy samples: {total}", "inclusive share of busy samples:"]
    for name, suffix in STEPS:
        n = sum(c for frames, c in busy if any(_name(f) == name and suffix in f for f in frames))
        if n:
            lines.append(f"  {name:<24}{suffix:<34}{100 * n / total:5.1f} %")
    own: collections.Counter[str] = collections.Counter()
    for frames, c in busy:
        own[frames[-1].split(" (")[0] + " (" + frames[-1].split("(")[-1].split(":")[0].split("/")[-1] + ")"] += c
    lines.append("most samples of their own:")
    lines += [f"  {100 * c / total:5.1f} %  {f}" for f, c in own.most_common(12)]
    return "\n".join(lines)


def cpu_by_command() -> collections.Counter[str]:
    """CPU seconds used so far by every process on the machine, by command name."""
    import os

    ticks = os.sysconf("SC_CLK_TCK")
    used: collections.Counter[str] = collections.Counter()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        used[name] += (int(fields[11]) + int(fields[12])) / ticks
    return used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--case", choices=["new", "dup"], default="new")
    parser.add_argument("--raw", type=Path, help="keep py-spy's collapsed stacks here")
    args = parser.parse_args()
    ensure_tools()
    work = workdir()
    raw = args.raw or work / "profile.txt"
    with scratch_database() as db:
        env = base_env(work, DATABASE_URL=db, REDIS_URL=REDIS, WEB_CONCURRENCY="1")
        port = free_port()
        url = f"http://127.0.0.1:{port}/webhooks/stripe"
        with gunicorn("webhooks:create_app()", env, port) as master:
            entries = signed_events(args.seconds * 4000 + 2000, "p")
            if args.case == "dup":
                prime(url, entries[:2000])
                entries = entries[:2000]
            script = lua_script(work / "profile.lua", entries)
            child = subprocess.run(["pgrep", "-P", str(master.pid)], capture_output=True, text=True).stdout.split()
            spy = subprocess.Popen(
                [
                    str(BIN / "py-spy"),
                    "record",
                    "--pid",
                    child[0],
                    "--format",
                    "raw",
                    "--threads",
                    "--duration",
                    str(args.seconds),
                    "--rate",
                    "200",
                    "--output",
                    str(raw),
                    "--nonblocking",
                    "--gil",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            before = cpu_by_command()
            result = wrk(url, script, args.seconds + 1, args.connections)
            spent = cpu_by_command()
            spent.subtract(before)
            spy.wait()
    print(
        f"{args.case} deliveries, {args.connections} connections, 1 gunicorn process: "
        f"{result['rps']:.0f} req/s, p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms"
    )
    print(summarize(raw))
    print("CPU seconds per 1000 requests, by process (the whole machine, other work included):")
    for name, seconds in spent.most_common(8):
        print(f"  {name:<20}{1000 * seconds / result['requests']:6.2f}")


if __name__ == "__main__":
    main()
