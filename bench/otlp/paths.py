"""The two paths from one API server to an OpenTelemetry Collector's file, as real processes.

- **A, the collector's ``k8s_events`` receiver**: ``otelcol`` (tests/standins/otelcol.py, contrib's
  receiver on the API server's kubeconfig, every namespace) writing each record to a file.
  Replicas are collectors of their own (their own files), the path's output all of them: two
  replicas are what a user runs for HA, each sending what it sees.
- **B, bridge → JetStream → k8s-event-otlp → collector**: a nats-server (JetStream, file store),
  bridges as deploy/ runs them (every key at its default, leader election on a Lease under
  deploy/'s ServiceAccount and RBAC, one identity per replica), the OTLP subscriber
  (``python -m k8s_event_consumer.otlp``, every key at its default but where it connects) and a
  collector with the OTLP receiver writing to a file.

Every process is registered with the sampler (CPU, RSS) when it starts and sampled once more
right before it is killed. Collectors run without the debug exporter.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.otlp.sampling import Sampler
from k8s_event_sim.configs import bridge_config, subscriber_config
from k8s_event_sim.natsserver import NatsServer
from k8s_event_sim.programs import BridgeProcess, ConsumerProcess
from tests.standins.otelcol import Collector, K8sEvents, Record, read

RECEIVER = "A"  # the path names in the results
BRIDGE = "B"
CLUSTER = "compare"
BRIDGE_NAMESPACE = "k8s-event-bridge"  # deploy/'s: the Lease lives there
WATCHING = "starting to watch namespaces for the events."  # the receiver's Start (v0.139.0)


@dataclass
class Replica:
    """One collector of path A and when it was started (epoch seconds)."""

    name: str
    collector: Collector
    started_at: float = 0.0

    def watching_since(self, after: float) -> float | None:
        """When its receiver logged "starting to watch" (epoch seconds), the first time after
        ``after``: the receiver's own start time (what it drops Events before) is earlier."""
        for line in self.collector.logs().splitlines():
            if WATCHING not in line:
                continue
            stamp = line.split("\t", 1)[0]
            try:
                at = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
            except ValueError:
                continue
            if at.timestamp() > after:
                return at.timestamp()
        return None


@dataclass
class ReceiverPath:
    workdir: Path
    kubeconfig: Path
    sampler: Sampler
    replicas: list[Replica] = field(default_factory=list)

    async def add(self, name: str) -> Replica:
        """Start one more replica (its own directory and file)."""
        c = Collector(
            self.workdir / name,
            k8s_events=K8sEvents(self.kubeconfig),
            debug_verbosity=None,
        )
        replica = Replica(name, c)
        self.replicas.append(replica)
        await self.start(replica)
        return replica

    async def start(self, replica: Replica) -> None:
        replica.started_at = time.time()
        await replica.collector.start(60)
        assert replica.collector.proc is not None
        self.sampler.register(RECEIVER, "otelcol (k8s_events)", replica.collector.proc.pid)

    def kill(self, replica: Replica) -> None:
        """SIGKILL: what its file exporter had not flushed is lost with it."""
        proc = replica.collector.proc
        if proc is not None:
            self.sampler.last(proc.pid)
        replica.collector.kill()

    def stop(self) -> None:
        for r in self.replicas:
            if r.collector.proc is not None:
                self.sampler.last(r.collector.proc.pid)
            r.collector.stop()  # SIGTERM: flushed

    def records(self) -> list[Record]:
        out: list[Record] = []
        for r in self.replicas:
            out.extend(read(r.collector.k8s_events_output).records)
        return out

    def text(self) -> str:
        """Every replica's output file as text (for the cheap checks while the run goes)."""
        parts = []
        for r in self.replicas:
            path = r.collector.k8s_events_output
            if path.exists():
                parts.append(path.read_text(errors="replace"))
        return "\n".join(parts)


@dataclass
class BridgePath:
    workdir: Path
    kubeconfig: Path  # deploy/'s ServiceAccount
    sampler: Sampler
    nats: NatsServer | None = None
    bridges: dict[str, BridgeProcess] = field(default_factory=dict)  # identity -> process
    otlp: ConsumerProcess | None = None
    otlp_config: Path | None = None
    collector: Collector | None = None
    subscriber_starts: int = 0

    async def start_collector(self) -> None:
        if self.collector is None:
            self.collector = Collector(self.workdir / "collector", debug_verbosity=None)
        await self.collector.start(60)
        assert self.collector.proc is not None
        self.sampler.register(BRIDGE, "otelcol (otlp)", self.collector.proc.pid)

    def stop_collector(self) -> None:
        """SIGTERM: a clean stop (what it took is flushed); its port answers nothing after."""
        assert self.collector is not None and self.collector.proc is not None
        self.sampler.last(self.collector.proc.pid)
        self.collector.stop(signal.SIGTERM)

    def start_nats(self) -> None:
        self.nats = NatsServer(str(self.workdir / "nats")).start()
        assert self.nats.proc is not None
        self.sampler.register(BRIDGE, "nats-server", self.nats.proc.pid)

    def bridge_config(self, identity: str) -> Path:
        assert self.nats is not None
        return bridge_config(
            self.workdir,
            self.nats.url,
            self.kubeconfig,
            defaults=True,
            name=f"bridge-{identity}.yaml",
            cluster={"name": CLUSTER},
            leader_election={"enabled": True, "namespace": BRIDGE_NAMESPACE, "identity": identity},
            log={"level": "info"},
        )

    def start_bridge(self, identity: str) -> BridgeProcess:
        """Start the replica ``identity`` (again, with its config, when it ran before: a
        container restarted in its Pod keeps the Pod's name, the Lease's identity)."""
        old = self.bridges.get(identity)
        if old is not None and old.running():
            raise RuntimeError(f"{identity} is running already")
        config = self.workdir / f"bridge-{identity}.yaml"
        if not config.exists():
            self.bridge_config(identity)
        b = BridgeProcess(config, self.workdir / f"bridge-{identity}.log").start()
        self.bridges[identity] = b
        assert b.proc is not None
        self.sampler.register(BRIDGE, "bridge", b.proc.pid)
        return b

    def kill_bridge(self, identity: str) -> None:
        b = self.bridges[identity]
        if b.proc is not None:
            self.sampler.last(b.proc.pid)
        b.kill()

    async def role(self, identity: str) -> str:
        """The replica's role (/status): leader, standby, or "" when it does not answer."""
        b = self.bridges[identity]
        if not b.running():
            return ""
        try:
            status, text = await b.get("/status")
        except (OSError, TimeoutError):
            return ""
        return str(json.loads(text).get("role", "")) if status == 200 else ""

    async def leader(self) -> str | None:
        """The identity of the replica that says it leads, if one does."""
        for identity in list(self.bridges):
            if await self.role(identity) == "leader":
                return identity
        return None

    def start_otlp(self) -> ConsumerProcess:
        assert self.nats is not None and self.collector is not None
        if self.otlp_config is None:
            self.otlp_config = subscriber_config(
                self.workdir,
                "k8s_event_consumer.otlp",
                {"servers": [self.nats.url]},
                self.kubeconfig,
                name="otlp.yaml",
                otlp={"endpoint": self.collector.url},
                log={"level": "info"},
            )
        if self.otlp is not None and self.otlp.running():
            raise RuntimeError("k8s-event-otlp is running already")
        self.subscriber_starts += 1
        p = ConsumerProcess(
            self.otlp_config,
            self.workdir / f"otlp-{self.subscriber_starts}.log",
            module="k8s_event_consumer.otlp",
        ).start()
        self.otlp = p
        assert p.proc is not None
        self.sampler.register(BRIDGE, "k8s-event-otlp", p.proc.pid)
        return p

    def kill_otlp(self) -> None:
        assert self.otlp is not None and self.otlp.proc is not None
        self.sampler.last(self.otlp.proc.pid)
        self.otlp.kill()

    async def held_records(self) -> float:
        """The subscriber's ``k8s_event_otlp_held_records``: records in hand, being sent."""
        assert self.otlp is not None
        return await self.otlp.metric("held_records")

    def stop(self) -> None:
        """Everything, the subscriber first (SIGTERM), the collector (flushed) last."""
        if self.otlp is not None and self.otlp.running():
            assert self.otlp.proc is not None
            self.sampler.last(self.otlp.proc.pid)
            self.otlp.signal(signal.SIGTERM)
            try:
                self.otlp.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.otlp.kill()
        for identity, b in self.bridges.items():
            if b.running():
                self.kill_bridge(identity)
        if self.nats is not None:
            if self.nats.proc is not None:
                self.sampler.last(self.nats.proc.pid)
            self.nats.stop()
        if self.collector is not None and self.collector.proc is not None:
            self.stop_collector()

    def records(self) -> list[Record]:
        assert self.collector is not None
        return read(self.collector.output).records

    def text(self) -> str:
        assert self.collector is not None
        path = self.collector.output
        return path.read_text(errors="replace") if path.exists() else ""
