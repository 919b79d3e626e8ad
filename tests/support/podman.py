"""Containers for the deployment tests (#40): podman with this machine's settings, a Debian base made
here (no registry is reachable), a wheelhouse for Debian's Python, and a record of everything a test
creates so that it is removed by id at the end.

podman needs ``runtime = "runc"`` (crun refuses the hybrid cgroups here), ``cgroup_manager =
"cgroupfs"`` and ``events_logger = "file"`` (no systemd) and limits no higher than the machine
allows: a ``containers.conf`` of the run's own, given by ``CONTAINERS_CONF`` (the machine's files
are never changed). Without systemd, container health checks never run: nothing waits on them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterable
from email.parser import Parser
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BASE = "docker.io/library/debian:bookworm-slim"  # the Dockerfile's, made here by debootstrap
DEBIAN_PYTHON = "3.11.2"  # bookworm's python3: the wheelhouse resolves dependency markers for it
CONF = """\
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=16384:16384"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""
# What Debian's official slim images leave out (their dpkg configuration), so the base made here
# is the size of the one a registry serves.
DPKG_EXCLUDES = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
"""
PLATFORMS = ("manylinux_2_36", "manylinux_2_28", "manylinux_2_17", "manylinux2014", "manylinux_2_5", "manylinux1")


class Failed(Exception):
    """A podman command failed: its arguments and what it printed."""


class Podman:
    """The ``podman`` command with the run's own configuration; ``made`` records what to remove."""

    def __init__(self, directory: Path) -> None:
        conf = directory / "containers.conf"
        conf.write_text(CONF)
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        self.made: list[tuple[str, str]] = []  # (kind, id): container, pod, volume, image, secret
        # Any other at the end was made by a test: anonymous volumes, podman's pause image for pods.
        self.volumes, self.images = self.ids("volume"), self.ids("image")

    def __call__(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise Failed(
                f"podman {' '.join(args)}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def ids(self, kind: str, *filters: str) -> set[str]:
        """The ids of every ``kind`` (container, pod, volume, image) now present, by ``--filter``s."""
        listing = {"container": ("ps", "-a", "-q", "--no-trunc"), "pod": ("pod", "ps", "-q", "--no-trunc"),
                   "volume": ("volume", "ls", "-q"), "image": ("images", "-q", "--no-trunc")}[kind]  # fmt: skip
        args = [*listing, *(f"--filter={f}" for f in filters)]
        return {ident.removeprefix("sha256:") for ident in self(*args).stdout.split()}

    def remove(self) -> list[str]:
        """Remove what was made, newest first, by id; what could not be removed, in one line each."""
        left = []
        self.made += [
            ("volume", v) for v in sorted(self.ids("volume") - self.volumes) if ("volume", v) not in self.made
        ]
        order = {"container": 0, "pod": 1, "secret": 2, "volume": 3, "image": 4}
        for kind, ident in sorted(reversed(self.made), key=lambda m: order[m[0]]):
            command = {"container": ("rm", "-f", "-v"), "pod": ("pod", "rm", "-f"), "volume": ("volume", "rm", "-f"),
                       "image": ("rmi", "-f"), "secret": ("secret", "rm")}[kind]  # fmt: skip
            done = self(*command, ident, check=False, timeout=120)
            if done.returncode != 0 and "no such" not in done.stderr.lower():
                left.append(f"{kind} {ident}: {done.stderr.strip()[-300:]}")
        self.made.clear()
        return left

    def run_detached(self, *args: str) -> str:
        ident = self("run", "-d", "--no-healthcheck", *args).stdout.strip().splitlines()[-1]
        self.made.append(("container", ident))
        return ident

    def build(self, context: Path, tag: str, *args: str, timeout: float = 600) -> str:
        """Build ``tag``; it and the build's intermediate images are removed at the end."""
        before = self.ids("image")
        try:
            self("build", "--pull=never", "--format", "docker", "-t", tag, *args, str(context), timeout=timeout)
        finally:
            self.made += [("image", ident) for ident in sorted(self.ids("image") - before)]
        return self("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()

    def inspect(self, what: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = json.loads(self("inspect", what).stdout)
        return found[0]

    def logs(self, ident: str) -> str:
        done = self("logs", ident, check=False)
        return done.stdout + done.stderr


def mirror() -> str:
    """The Debian mirror apt uses here (deb822 ``URIs:`` or a one-line ``deb`` source)."""
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        for pattern in (r"^URIs:\s*(\S+/debian)/?\s*$", r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+/debian)/?\s+bookworm"):
            found = re.search(pattern, text, re.MULTILINE)
            if found:
                return found.group(1)
    return "http://deb.debian.org/debian"


def make_base(podman: Podman, directory: Path) -> None:
    """``debian:bookworm-slim`` made here: ``debootstrap --variant=minbase`` from apt's mirror, slimmed
    as Debian's official image is, imported under the base's name (kept: it stands for a pulled image)."""
    if podman("image", "exists", BASE, check=False).returncode == 0:
        return
    rootfs = directory / "rootfs"
    subprocess.run(
        ["debootstrap", "--variant=minbase", "bookworm", str(rootfs), mirror()],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker").write_text(DPKG_EXCLUDES)
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale"):
        for path in (rootfs / junk).glob("*"):
            if path.is_dir() and not path.is_symlink():
                if junk == "usr/share/doc":  # keep each package's copyright, as the official image does
                    for inner in path.iterdir():
                        if inner.name != "copyright":
                            shutil.rmtree(inner) if inner.is_dir() and not inner.is_symlink() else inner.unlink()
                    continue
                shutil.rmtree(path)
            elif path.name not in ("lock", "partial"):
                path.unlink()
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(["podman", "import", "-", BASE], stdin=tar.stdout, env=podman.env, check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    tar.wait(timeout=60)
    shutil.rmtree(rootfs, ignore_errors=True)


def wheelhouse(directory: Path, extras: Iterable[str] = ()) -> Path:
    """Wheels of the package (as released) and of every dependency for Debian's Python, so that the
    image's build installs offline (``-v wheelhouse:/wheelhouse:ro``): no index, no CA bundle."""
    house = directory / "wheelhouse"
    house.mkdir(exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(house), str(ROOT)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    [wheel] = house.glob("webhooks-*.whl")
    target = ["--only-binary=:all:", "--python-version", DEBIAN_PYTHON, "--implementation", "cp",
              "--abi", "cp311", "--abi", "abi3", "--abi", "none", "--platform", "linux_x86_64", "--platform", "any",
              *(a for p in PLATFORMS for a in ("--platform", f"{p}_x86_64"))]  # fmt: skip
    wanted = [f"{wheel}[{','.join(extras)}]" if extras else str(wheel)]
    for _ in range(5):  # pip evaluates python_full_version markers for its own Python: add what Debian's needs
        subprocess.run([*pip, "download", "-q", "-d", str(house), *target, *wanted],
                       check=True, capture_output=True, timeout=600)  # fmt: skip
        missing = _needed_by_debian(house)
        if not missing:
            return house
        wanted = [*wanted, *missing]
    raise AssertionError(f"wheelhouse: still missing {missing}")


def _needed_by_debian(house: Path) -> list[str]:
    """Requirements whose markers hold for Debian's Python but not for this one, and not yet here."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    have = {canonicalize_name(w.name.split("-")[0]) for w in house.glob("*.whl")}
    env = {**default_environment(), "python_full_version": DEBIAN_PYTHON, "python_version": "3.11"}
    needed = []
    for wheel in house.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            headers = Parser().parsestr(archive.read(meta).decode("utf-8", "replace"))
        for line in headers.get_all("Requires-Dist") or []:
            requirement = Requirement(line)
            if requirement.marker is None or "extra" in str(requirement.marker):
                continue
            if requirement.marker.evaluate(env) and canonicalize_name(requirement.name) not in have:
                needed.append(str(requirement).split(";")[0])
    return sorted(set(needed))


def wait_http(url: str, timeout: float = 60, auth: tuple[str, str] | None = None) -> float:
    """Seconds until ``url`` answers 200 (polled until ``timeout``)."""
    import requests

    from tests.conftest import wait_until

    def ok() -> bool:
        try:
            return requests.get(url, timeout=5, auth=auth).status_code == 200
        except requests.RequestException:
            return False

    start = time.monotonic()
    wait_until(ok, timeout=timeout)
    return time.monotonic() - start
