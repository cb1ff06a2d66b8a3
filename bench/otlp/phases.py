"""The run: both paths on one real API server, one load, the same faults, phase after phase.

Every process of either path runs under :class:`Kubelet`, which starts it again
``restart_delay`` seconds after it exits, as a kubelet restarts a container in its Pod (a
bridge that lost its Lease exits 1 and comes back so; the collector of path B is the one
process left out: its outage is a fault of its own). The load (``load.Recorders``) writes all
along; each phase tags the versions accepted while it runs:

1. ``warm-up``: both paths running, the load flowing;
2. ``restart``: the receiving side SIGKILLed while Events flow and restarted by its kubelet:
   path A's collector; path B's bridge leader (the same identity: its Lease is taken back at
   once) and the OTLP subscriber, at the moment it holds a batch it is sending (its
   ``held_records`` above 0), the worst one;
3. ``otlp collector outage``: path B's collector stopped (SIGTERM) for ``outage`` seconds, then
   started again; path A has no equivalent (its collector is the receiver: phase 2);
4. ``apiserver outage``: kube-apiserver SIGKILLed for ``outage`` seconds, the load queuing its
   writes meanwhile and sending them right after it is back;
5. ``leader change``: path B's leader SIGKILLed for good (its Pod gone), the standby takes the
   Lease once it expired, a new replica (another identity) starts as the next standby; path A
   gets a second replica (what a user runs for HA: the receiver of the pinned build elects no
   leader), both run ``both_replicas`` seconds, then the first is SIGKILLed for good.

Each fault waits on conditions (a replica ready, a leader in /status, the output carrying a
version written after the fault ended), never on the clock; the clock only bounds how long the
load runs around them. Then the load stops, the run waits until path B's output holds every
version (its promise) and path A's has stopped growing, stops everything and matches
(``matching``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.otlp import log, matching
from bench.otlp.load import Recorders, Version
from bench.otlp.outputs import Tail, bridge_key, key_a, receiver_key
from bench.otlp.paths import BRIDGE, RECEIVER, BridgePath, ReceiverPath, Replica
from bench.otlp.restarting import Kubelet, exit_of, running
from bench.otlp.sampling import Sampler
from k8s_event_sim.programs import cpu_seconds
from k8s_event_sim.waiting import NotMet, eventually
from tests.standins.controlplane import ControlPlane
from tests.standins.otelcol import Record

PHASES = ("warm-up", "restart", "otlp collector outage", "apiserver outage", "leader change")
NAMESPACES = ("compare-a", "compare-b", "compare-c")
SUBSCRIBER_BATCH = 512  # k8s-event-otlp's nats.batch (its default): the bound's unit
PROBE = 10.0  # seconds the subscriber is watched for a batch in hand before its SIGKILL


@dataclass(frozen=True)
class Plan:
    rate: float = 20.0  # operations a second (new Events and repeats)
    warmup: float = 20.0  # seconds of load before the first fault
    steady: float = 20.0  # seconds of load after each fault, once both paths carry again
    outage: float = 20.0  # seconds the OTLP collector, the API server are away
    restart_delay: float = 2.0  # seconds from an exit to the restart (a kubelet's)
    both_replicas: float = 15.0  # seconds both of path A's replicas run
    recover_timeout: float = 150.0  # the most a condition is waited for
    bump_ratio: float = 0.3


FULL = Plan()
QUICK = Plan(rate=15.0, warmup=6.0, steady=6.0, outage=10.0, both_replicas=6.0)


# -- the run -----------------------------------------------------------------------------------


class Comparison:
    """One run on the control plane ``cp`` (started; its API server is stopped and started
    again by phase 4), everything else in ``workdir``."""

    def __init__(self, cp: ControlPlane, workdir: Path, plan: Plan) -> None:
        self.cp = cp
        self.workdir = workdir
        self.plan = plan
        self.sampler = Sampler()
        self.kubelet = Kubelet(plan.restart_delay)
        self.faults: list[dict[str, Any]] = []
        self.cpu_at: dict[str, dict[str, float]] = {}  # phase -> path -> CPU s at its start
        self.phase_started: dict[str, float] = {}
        self.subscriber_kills = 0
        # path A's collector: when it was killed in phase 2 and when it was started again
        self.a_restart: tuple[float, float] | None = None
        self.started = time.monotonic()

    async def _check(
        self,
        what: str,
        check: Callable[[], Any],
        timeout: float | None = None,
        since: float | None = None,
    ) -> float:
        """Wait until ``check`` holds (NotMet with ``what`` past the timeout); the seconds from
        ``since`` (epoch seconds; default: now) until it held."""
        since = time.time() if since is None else since
        await eventually(check, timeout or self.plan.recover_timeout, 0.2, what=what)
        return round(time.time() - since, 2)

    async def _until(
        self,
        what: str,
        check: Callable[[], Any],
        timeout: float | None = None,
        since: float | None = None,
    ) -> float | None:
        """As ``_check``, but None when not met in time (a path that does not recover is a
        finding, not a broken run)."""
        try:
            return await self._check(what, check, timeout, since)
        except NotMet:
            log(f"not met in time: {what}")
            return None

    def _fresh(self, since: float) -> list[Version]:
        """New Events (their first version) whose write was sent after ``since``."""
        return [v for v in self.load.truth if v.created and v.sent_at > since]

    def _carries_a(self, since: float, replica: Replica | None = None) -> bool:
        self.tail_a.poll()
        path = replica.collector.k8s_events_output if replica is not None else None
        return any(self.tail_a.has(key_a(v), path) for v in self._fresh(since))

    def _carries_b(self, since: float) -> bool:
        self.tail_b.poll()
        return any(self.tail_b.has(v.id) for v in self._fresh(since))

    def _enter(self, phase: str) -> None:
        log(f"phase: {phase}")
        self.load.phase = phase
        self.phase_started[phase] = time.time()
        self.sampler.sample()
        self.cpu_at[phase] = self._cpu()

    def _cpu(self) -> dict[str, float]:
        return {
            path: round(sum(p.cpu for p in self.sampler.procs if p.path == path), 2)
            for path in (RECEIVER, BRIDGE)
        }

    async def run(self) -> dict[str, Any]:
        p = self.plan
        self.sampler.start()
        self.kubelet.start()
        kubeconfig = await asyncio.to_thread(self.cp.deployed_bridge_kubeconfig)
        self.a = ReceiverPath(self.workdir / "a", self.cp.kubeconfig, self.sampler)
        self.b = BridgePath(self.workdir / "b", kubeconfig, self.sampler)
        self.tail_a = Tail(
            lambda: [r.collector.k8s_events_output for r in self.a.replicas], receiver_key
        )
        self.tail_b = Tail(
            lambda: [self.b.collector.output] if self.b.collector else [], bridge_key
        )
        self.load = Recorders(
            self.cp.url, self.cp.ssl_context(), NAMESPACES, p.rate, bump_ratio=p.bump_ratio
        )
        try:
            async with self.load:
                await self._setup()
                await self._phases()
                result = await self._drain()
        finally:
            await self.kubelet.stop()
            await self.sampler.stop()
            self.a.stop()
            self.b.stop()
        return result

    async def _setup(self) -> None:
        a1 = await self.a.add("a-1")
        self._supervise_a(a1)
        self.b.start_nats()
        await self.b.start_collector()
        for identity in ("bridge-a", "bridge-b"):
            await self._start_bridge(identity)
            if identity == "bridge-a":
                await self._check("bridge-a leads", lambda: self._leads("bridge-a"), 60)
        await self._start_otlp()
        self.kubelet.watch("k8s-event-otlp", self._otlp_running, self._start_otlp, self._otlp_code)
        log("both paths running")

    async def _leads(self, identity: str) -> bool:
        return await self.b.leader() == identity

    def _supervise_a(self, replica: Replica) -> None:
        c = replica.collector

        async def start() -> None:
            await self.a.start(replica)

        self.kubelet.watch(replica.name, c.running, start, lambda: exit_of(c))

    async def _start_bridge(self, identity: str) -> None:
        b = self.b.start_bridge(identity)
        await b.wait_ready(60)
        if identity not in self.kubelet.watched:

            async def again() -> None:
                await self._start_bridge(identity)

            self.kubelet.watch(
                identity,
                lambda: self.b.bridges[identity].running(),
                again,
                lambda: exit_of(self.b.bridges[identity]),
            )

    def _otlp_running(self) -> bool:
        return self.b.otlp is not None and self.b.otlp.running()

    def _otlp_code(self) -> str:
        return exit_of(self.b.otlp)

    async def _start_otlp(self) -> None:
        otlp = self.b.start_otlp()
        await otlp.wait_ready(60)

    # -- the phases

    async def _phases(self) -> None:
        p = self.plan
        self._enter("warm-up")
        since = time.time()
        self.load.start()
        await self._check("path A carries the load", lambda: self._carries_a(since))
        await self._check("path B carries the load", lambda: self._carries_b(since))
        await asyncio.sleep(p.warmup)
        await self._restart()
        await asyncio.sleep(p.steady)
        await self._collector_outage()
        await asyncio.sleep(p.steady)
        await self._apiserver_outage()
        await asyncio.sleep(p.steady)
        await self._leader_change()
        await asyncio.sleep(p.steady)
        self.load.stop()
        self.phase_started["end of load"] = time.time()

    async def _restart(self) -> None:
        self._enter("restart")
        leader = await self.b.leader()
        assert leader is not None, "no bridge leads"
        (a1,) = self.a.replicas
        # the worst moment for the subscriber: a batch in hand, being sent (what reading its
        # /metrics to find it costs it is measured: ``subscriber_cpu_while_probed_s``)
        assert self.b.otlp is not None and self.b.otlp.proc is not None
        pid = self.b.otlp.proc.pid
        cpu_before, probe_start = cpu_seconds(pid), time.monotonic()
        in_hand = await self._batch_in_hand(pid)
        self.b.kill_otlp()
        self.b.kill_bridge(leader)
        self.a.kill(a1)
        self.subscriber_kills += 1
        killed = time.time()
        probed = round(time.monotonic() - probe_start, 2)
        probe_cpu = round(next(p.cpu for p in self.sampler.procs if p.pid == pid) - cpu_before, 2)
        log(f"SIGKILL: k8s-event-otlp, path B's leader {leader} and path A's collector")
        # the kubelet starts each again restart_delay later; times from the SIGKILL
        took_back, a_back, b_back = await asyncio.gather(
            self._until(
                f"{leader} leads again",
                lambda: self._leads(leader) if self.b.bridges[leader].running() else False,
                since=killed,
            ),
            self._until("path A carries again", lambda: self._carries_a(killed), since=killed),
            self._until("path B carries again", lambda: self._carries_b(killed), since=killed),
        )
        restarted_a = a1.started_at
        if restarted_a > killed:
            self.a_restart = (killed, restarted_a)
        self.faults.append(
            {
                "phase": "restart",
                "what": "SIGKILL while Events flow; each restarted by its kubelet after "
                f"{self.plan.restart_delay:g} s",
                "times_from": "the SIGKILL",
                "killed_at": killed,
                "subscriber_killed_with_a_batch_in_hand": in_hand,
                "subscriber_probed_s": probed,
                "subscriber_cpu_while_probed_s": probe_cpu,
                "bridge_leader": leader,
                "leader_again_after_s": took_back,
                "A_carries_again_after_s": a_back,
                "B_carries_again_after_s": b_back,
                "A_restarted_at": restarted_a,
            }
        )

    async def _holding(self) -> bool:
        try:
            return await self.b.held_records() > 0
        except (OSError, TimeoutError):
            return False

    async def _batch_in_hand(self, pid: int) -> bool:
        """Until the subscriber holds a batch it is sending (``held_records`` above 0), for at
        most PROBE seconds; whether it was found. Its /metrics is read only while /proc says it
        is running (a send maps, encodes and compresses: it runs; idle between batches, it
        sleeps), so the probe costs it little; the bench pays for the polling of /proc."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PROBE
        while loop.time() < deadline:
            if running(pid) and await self._holding():
                return True
            await asyncio.sleep(0.001)
        return False

    async def _collector_outage(self) -> None:
        self._enter("otlp collector outage")
        self.b.stop_collector()
        stopped = time.time()
        log(f"path B's collector stopped for {self.plan.outage:g} s")
        await asyncio.sleep(self.plan.outage)
        await self.b.start_collector()
        back = time.time()
        b_back = await self._until(
            "path B carries again", lambda: self._carries_b(back), since=back
        )
        self.faults.append(
            {
                "phase": "otlp collector outage",
                "what": f"path B's collector stopped (SIGTERM) for {self.plan.outage:g} s",
                "times_from": "its start again",
                "stopped_at": stopped,
                "started_at": back,
                "B_carries_again_after_s": b_back,
            }
        )

    async def _apiserver_outage(self) -> None:
        self._enter("apiserver outage")
        await asyncio.to_thread(self.cp.stop_apiserver)
        stopped = time.time()
        log(f"kube-apiserver stopped for {self.plan.outage:g} s")
        await asyncio.sleep(self.plan.outage)
        queued = self.load.queued
        await asyncio.to_thread(self.cp.start_apiserver)
        back = time.time()
        log(f"kube-apiserver back, {queued} writes queued")
        drained = await self._until("the queued writes written", self.load.drained)
        a_back = await self._until("path A carries again", lambda: self._carries_a(back))
        b_back = await self._until(
            "path B carries again", lambda: self._carries_b(back), since=back
        )
        self.faults.append(
            {
                "phase": "apiserver outage",
                "what": f"kube-apiserver SIGKILLed for {self.plan.outage:g} s, writes queued",
                "times_from": "its readiness again",
                "stopped_at": stopped,
                "ready_at": back,
                "writes_queued": queued,
                "queue_written_after_s": drained,
                "A_carries_again_after_s": a_back,
                "B_carries_again_after_s": b_back,
            }
        )

    async def _leader_change(self) -> None:
        self._enter("leader change")
        a2 = await self.a.add("a-2")
        self._supervise_a(a2)
        both = await self._until(
            "path A's second replica carries",
            lambda: self._carries_a(a2.started_at, a2),
            since=a2.started_at,
        )
        await asyncio.sleep(self.plan.both_replicas)
        leader = await self.b.leader()
        assert leader is not None, "no bridge leads"
        a1 = self.a.replicas[0]
        self.kubelet.forget(leader)  # its Pod is gone: no restart in place
        self.kubelet.forget(a1.name)
        self.b.kill_bridge(leader)
        self.a.kill(a1)
        killed = time.time()
        log(f"SIGKILL for good: path B's leader {leader}, path A's first replica")
        # times from the SIGKILL
        new, b_back = await asyncio.gather(
            self._until("a standby takes the Lease", self._new_leader(leader), since=killed),
            self._until("path B carries again", lambda: self._carries_b(killed), since=killed),
        )
        new_leader = await self.b.leader()
        replacement = "bridge-c"  # the new Pod: another name, another identity
        await self._start_bridge(replacement)
        self.faults.append(
            {
                "phase": "leader change",
                "what": "path B's leader SIGKILLed for good, a new replica as the next standby; "
                f"path A: a second replica for {self.plan.both_replicas:g} s, then the first "
                "SIGKILLed for good",
                "times_from": "the SIGKILL (A's second replica: its start)",
                "A_second_replica_started_at": a2.started_at,
                "A_second_replica_carries_after_s": both,
                "killed_at": killed,
                "old_leader": leader,
                "new_leader": new_leader,
                "lease_taken_after_s": new,
                "replacement": replacement,
                "B_carries_again_after_s": b_back,
            }
        )

    def _new_leader(self, old: str) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            now = await self.b.leader()
            return now is not None and now != old

        return check

    # -- the end

    async def _drain(self) -> dict[str, Any]:
        await self._check("every write accepted", self.load.drained)
        truth = list(self.load.truth)
        with (self.workdir / "truth.jsonl").open("w") as f:  # for a look with --keep
            for v in truth:
                f.write(json.dumps(asdict(v)) + "\n")
        log(f"load stopped: {len(truth)} versions written; waiting for the outputs")
        end = self.phase_started["end of load"]
        b_all = await self._until(
            "path B's output holds every version", lambda: self._b_holds(truth), since=end
        )
        a_quiet = await self._until(
            "path A's output stopped growing", self._a_quiet(), 60, since=end
        )
        self.sampler.sample()
        cpu_end = self._cpu()
        await self.sampler.stop()
        await self.kubelet.stop()
        self.a.stop()
        self.b.stop()
        records_a = self.a.records()
        records_b = self.b.records()
        return self._result(truth, records_a, records_b, cpu_end, b_all, a_quiet)

    def _b_holds(self, truth: list[Version]) -> bool:
        self.tail_b.poll()
        return all(self.tail_b.has(v.id) for v in truth)

    def _a_quiet(self) -> Callable[[], bool]:
        sizes: list[tuple[float, int]] = []

        def check() -> bool:
            total = sum(
                r.collector.k8s_events_output.stat().st_size
                for r in self.a.replicas
                if r.collector.k8s_events_output.exists()
            )
            now = time.monotonic()
            sizes.append((now, total))
            # unchanged for the last 3 s
            old = [s for t, s in sizes if t <= now - 3.0]
            return (
                bool(old)
                and old[-1] == total
                and all(s == total for t, s in sizes if t > now - 3.0)
            )

        return check

    def _result(
        self,
        truth: list[Version],
        records_a: list[Record],
        records_b: list[Record],
        cpu_end: dict[str, float],
        b_all: float | None,
        a_quiet: float | None,
    ) -> dict[str, Any]:
        by_id = {v.id: v for v in truth}
        a = matching.receiver_path(truth, records_a)
        b = matching.bridge_path(truth, records_b)
        sum_a = a.summary(truth, PHASES)
        sum_b = b.summary(truth, PHASES)
        for summary in (sum_a, sum_b):
            summary["lost_versions"] = [described(by_id[i]) for i in summary.pop("lost_ids")]
        certain = matching.certain_lost(truth, self.a_restart)
        sum_a["certain_lost"] = len(certain)
        sum_a["certain_lost_in_output"] = sorted(set(certain) & set(a.copies))
        if self.a_restart is not None:
            # the rest of what path A lost in its restart: what happened while its collector
            # was starting (from its process's start to its receiver's log line "starting to
            # watch": the receiver's start time, which it drops what happened before, lies
            # between), and what was sent before the kill (its informer had not handed it on,
            # or its file exporter had not flushed it, when it died)
            killed, spawned = self.a_restart
            watching = self.a.replicas[0].watching_since(spawned) or spawned
            lost = [by_id[i] for i in a.lost(truth) if by_id[i].phase == "restart"]
            after = [v for v in lost if v.sent_at > killed and v.id not in certain]
            starting = [v for v in after if v.occurred < watching]
            sum_a["restart_lost"] = {
                "certain": len(certain),
                "while_it_started": len(starting),
                "written_before_the_kill": sum(1 for v in lost if v.sent_at <= killed),
                "other": len(after) - len(starting),
                "receiver_started_s": round(watching - spawned, 3),
            }
        sum_b["duplicate_bound"] = SUBSCRIBER_BATCH * self.subscriber_kills
        sum_b["output_complete_after_s"] = b_all
        sum_a["output_quiet_after_s"] = a_quiet
        cpu_phase: dict[str, dict[str, float]] = {}
        marks = [*PHASES, "end"]
        at = {**self.cpu_at, "end": cpu_end}
        for phase, after in zip(PHASES, marks[1:], strict=True):
            cpu_phase[phase] = {
                path: round(at[after][path] - at[phase][path], 2) for path in (RECEIVER, BRIDGE)
            }
        warm = self.phase_started["restart"] - self.phase_started["warm-up"]
        for path, summary in ((RECEIVER, sum_a), (BRIDGE, sum_b)):
            res = self.sampler.summary(path)
            res["cpu_s_per_1k_versions"] = round(res["cpu_s"] / max(1, len(truth)) * 1000, 3)
            res["cores_in_warm_up"] = round(cpu_phase["warm-up"][path] / warm, 4)
            res["cpu_s_per_phase"] = {ph: c[path] for ph, c in cpu_phase.items()}
            summary["resources"] = res
        versions = {phase: sum(1 for v in truth if v.phase == phase) for phase in PHASES}
        return {
            "plan": asdict(self.plan),
            "phases": list(PHASES),
            "namespaces": list(NAMESPACES),
            "truth": {
                "versions": len(truth),
                "events": len({v.uid for v in truth}),
                "repeats": sum(1 for v in truth if not v.created),
                "per_phase": versions,
                "writes_retried": self.load.retries,
                "most_writes_queued": self.load.max_queued,
            },
            "faults": self.faults,
            "restarts": self.kubelet.restarts,
            "paths": {RECEIVER: sum_a, BRIDGE: sum_b},
            "phase_started_at": self.phase_started,
            "duration_s": round(time.monotonic() - self.started, 1),
        }


def described(v: Version) -> dict[str, Any]:
    """A version as the results name it (a lost one)."""
    return {
        "id": v.id,
        "phase": v.phase,
        "count": v.count,
        "last_timestamp": v.last_timestamp,
        "sent_at": round(v.sent_at, 3),
        "accepted_at": round(v.accepted_at, 3),
    }


def dump(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, sort_keys=False)
