"""Superseded by ``benchmarks/ingest.py`` (same cases and more; see ``benchmarks/README.md``).

.venv/bin/python benchmarks/receive.py [ingest.py's options]
"""

from __future__ import annotations

import runpy
from pathlib import Path

if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).with_name("ingest.py")), run_name="__main__")
