"""What a process pays to start: ``create_app()`` on an empty configuration, in a fresh interpreter
each round, beside a bare Flask app measured in the same rounds (the baseline).

    .venv/bin/python benchmarks/startup.py [--rounds 7]

Each round runs both in new ``python`` processes, alternated, and reads the time each spent from
its first import to the app built (not the interpreter's own start). Prints the median and the
spread of each, their ratio, the modules a broker client brings (none should be imported), and
whether ``create_app()`` met the goal of 0.3 s (#39).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

OURS = """
import json, sys, time
t = time.perf_counter()
import webhooks
webhooks.create_app({"DATABASE_URL": "sqlite:///%s"})
print(json.dumps([time.perf_counter() - t, sorted(m for m in ("pika", "nats", "botocore") if m in sys.modules)]))
"""
BASELINE = """
import json, time
t = time.perf_counter()
import flask, sqlalchemy, redis, rq
flask.Flask("baseline")
print(json.dumps([time.perf_counter() - t, []]))
"""
GOAL = 0.3


def measure(code: str) -> tuple[float, list[str]]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    seconds, brokers = json.loads(out.strip().splitlines()[-1])
    return float(seconds), list(brokers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    database = Path(tempfile.mkdtemp(prefix="wh-startup-")) / "startup.db"
    ours, base, brokers = [], [], set()
    measure(OURS % database)  # the first run migrates nothing but warms the disk cache: not counted
    for _ in range(args.rounds):
        seconds, found = measure(OURS % database)
        ours.append(seconds)
        brokers.update(found)
        base.append(measure(BASELINE)[0])
    o, b = statistics.median(ours), statistics.median(base)
    print(f"create_app()        median {o:.3f} s  (min {min(ours):.3f}, max {max(ours):.3f})")
    print(f"flask+sqlalchemy+rq median {b:.3f} s  (min {min(base):.3f}, max {max(base):.3f})")
    print(f"ratio {o / b:.2f}; broker clients imported: {sorted(brokers) or 'none'}")
    print(f"goal create_app() <= {GOAL} s: {'met' if o <= GOAL else 'missed'}")


if __name__ == "__main__":
    main()
