"""Realistic core/v1 Events and a bounded, seeded workload that feeds them to the simulator.

:class:`Workload` is the one writer of Events for the demo, the benchmark, the soak and the
tests (the e2e tier draws from it too and writes to a real kube-apiserver).

The shapes follow what ``kubectl get events -o json`` shows on real clusters: the kubelet and
controllers write core/v1 Events (``count``, ``firstTimestamp``/``lastTimestamp``,
``source``), the scheduler writes through events.k8s.io (``eventTime``, ``action``,
``reportingComponent``, no count, sometimes a ``series``); both are read back as core/v1.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import random
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from k8s_event_sim.apiserver import SimApiServer

__all__ = [
    "NAMESPACES",
    "EventTarget",
    "Workload",
    "WorkloadStats",
    "make_event",
    "run_workload",
]

Style = Literal["core", "events.k8s.io"]

NAMESPACES = (
    "default",
    "kube-system",
    "monitoring",
    "ingress-nginx",
    "cert-manager",
    "payments",
    "checkout",
    "search",
    "data",
    "staging",
)
APPS = ("api", "web", "worker", "redis", "postgres", "gateway", "frontend", "scheduler", "cache")
IMAGES = {
    "api": "registry.example.com/shop/api:v2.14.3",
    "web": "registry.example.com/shop/web:v1.9.0",
    "worker": "registry.example.com/shop/worker:v2.14.3",
    "redis": "redis:7.2.4-alpine",
    "postgres": "postgres:16.2",
    "gateway": "images.example.com/ingress-nginx/controller:v1.10.0",
    "frontend": "registry.example.com/shop/frontend:v3.1.0",
    "scheduler": "registry.example.com/platform/cron-scheduler:v0.8.1",
    "cache": "memcached:1.6.26",
}
NODES = tuple(f"ip-10-0-{a}-{b}.eu-west-1.compute.internal" for a, b in ((1, 17), (2, 34), (3, 51)))
NODES += ("worker-pool-a-7f9c2", "worker-pool-b-3d81e")
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
_ALNUM = "bcdfghjklmnpqrstvwxz2456789"

# (reason, type, involved kind, weight); FailedPullImage is the kubelet's "Failed".
SCENARIOS: tuple[tuple[str, str, str, int], ...] = (
    ("BackOff", "Warning", "Pod", 10),
    ("Unhealthy", "Warning", "Pod", 8),
    ("FailedMount", "Warning", "Pod", 4),
    ("FailedCreatePodSandBox", "Warning", "Pod", 2),
    ("Failed", "Warning", "Pod", 3),
    ("Evicted", "Warning", "Pod", 1),
    ("NodeNotReady", "Warning", "Pod", 1),
    ("FailedScheduling", "Warning", "Pod", 4),
    ("OOMKilling", "Warning", "Node", 2),
    ("NodeNotReady", "Normal", "Node", 1),
    ("Scheduled", "Normal", "Pod", 8),
    ("Pulling", "Normal", "Pod", 9),
    ("Pulled", "Normal", "Pod", 9),
    ("Created", "Normal", "Pod", 9),
    ("Started", "Normal", "Pod", 9),
    ("Killing", "Normal", "Pod", 5),
    ("SuccessfulCreate", "Normal", "ReplicaSet", 5),
    ("ScalingReplicaSet", "Normal", "Deployment", 4),
    ("SuccessfulRescale", "Normal", "HorizontalPodAutoscaler", 2),
    ("FailedGetResourceMetric", "Warning", "HorizontalPodAutoscaler", 1),
    ("ProvisioningFailed", "Warning", "PersistentVolumeClaim", 1),
    ("ExternalProvisioning", "Normal", "PersistentVolumeClaim", 1),
)
_WEIGHTS = [weight for *_, weight in SCENARIOS]
REASONS = frozenset(reason for reason, *_ in SCENARIOS)

API_VERSIONS = {
    "Pod": "v1",
    "Node": "v1",
    "PersistentVolumeClaim": "v1",
    "ReplicaSet": "apps/v1",
    "Deployment": "apps/v1",
    "HorizontalPodAutoscaler": "autoscaling/v2",
}
# reason -> (component, events.k8s.io action) of the real reporter
REPORTERS = {
    "FailedScheduling": ("default-scheduler", "Scheduling"),
    "Scheduled": ("default-scheduler", "Binding"),
    "OOMKilling": ("kernel-monitor", "OOMKilling"),
    "NodeNotReady": ("node-controller", "NodeNotReady"),
    "SuccessfulCreate": ("replicaset-controller", "Create"),
    "ScalingReplicaSet": ("deployment-controller", "Scale"),
    "SuccessfulRescale": ("horizontal-pod-autoscaler", "Rescale"),
    "FailedGetResourceMetric": ("horizontal-pod-autoscaler", "GetResourceMetric"),
    "ProvisioningFailed": ("persistentvolume-controller", "Provision"),
    "ExternalProvisioning": ("persistentvolume-controller", "Provision"),
}


@dataclasses.dataclass
class WorkloadStats:
    """What a workload run did."""

    created: int = 0
    bumped: int = 0
    conflicts: int = 0  # creates refused because the name exists (same seed run twice)
    elapsed: float = 0.0

    @property
    def operations(self) -> int:
        return self.created + self.bumped


def _rand(rng: random.Random, length: int, alphabet: str = _ALNUM) -> str:
    return "".join(rng.choices(alphabet, k=length))


def _uid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _time(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _message(
    rng: random.Random, reason: str, kind: str, app: str, name: str, namespace: str, node: str
) -> str:
    image = IMAGES[app]
    ip = f"10.244.{rng.randint(0, 7)}.{rng.randint(2, 250)}"
    rs = name.rsplit("-", 1)[0]
    messages: dict[str, Callable[[], str]] = {  # lazy: draw only what is used
        "BackOff": lambda: (
            f"Back-off restarting failed container {app} in pod {name}_{namespace}({_uid(rng)})"
        ),
        "Unhealthy": lambda: rng.choice(
            (
                f'Readiness probe failed: Get "http://{ip}:8080/healthz": dial tcp {ip}:8080: '
                "connect: connection refused",
                "Liveness probe failed: HTTP probe failed with statuscode: 500",
                f'Startup probe failed: Get "http://{ip}:8080/ready": context deadline exceeded '
                "(Client.Timeout exceeded while awaiting headers)",
            )
        ),
        "FailedMount": lambda: (
            f'MountVolume.SetUp failed for volume "{app}-config" : configmap '
            f'"{app}-config" not found'
        ),
        "FailedCreatePodSandBox": lambda: (
            "Failed to create pod sandbox: rpc error: code = Unknown desc = "
            f'failed to setup network for sandbox "{rng.getrandbits(256):064x}": plugin '
            'type="calico" failed (add): error getting ClusterInformation: connection is '
            "unauthorized: Unauthorized"
        ),
        "Failed": lambda: (
            f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to '
            f'pull and unpack image "{image}": failed to resolve reference "{image}": not found'
        ),
        "Evicted": lambda: (
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: "
            f"{rng.randint(40000, 99000)}Ki. Container {app} was using "
            f"{rng.randint(900000, 3000000)}Ki, request is 512Mi, has larger consumption of memory."
        ),
        "NodeNotReady": lambda: (
            "Node is not ready" if kind == "Pod" else f"Node {name} status is now: NodeNotReady"
        ),
        "FailedScheduling": lambda: (
            f"0/{len(NODES)} nodes are available: 2 Insufficient cpu, 3 node(s) "
            "had untolerated taint {node-role.kubernetes.io/control-plane: }. preemption: "
            f"0/{len(NODES)} nodes are available: 2 No preemption victims found for incoming "
            "pod, 3 Preemption is not helpful for scheduling."
        ),
        "OOMKilling": lambda: (
            f"Memory cgroup out of memory: Killed process {rng.randint(1000, 99999)} "
            f"({app}) total-vm:{rng.randint(1_000_000, 9_000_000)}kB, anon-rss:"
            f"{rng.randint(500_000, 2_000_000)}kB, file-rss:{rng.randint(1000, 90000)}kB, "
            f"shmem-rss:0kB, UID:1000 pgtables:{rng.randint(1000, 9000)}kB oom_score_adj:"
            f"{rng.choice((-997, 999, 1000))}"
        ),
        "Scheduled": lambda: f"Successfully assigned {namespace}/{name} to {node}",
        "Pulling": lambda: f'Pulling image "{image}"',
        "Pulled": lambda: (
            f'Successfully pulled image "{image}" in {rng.randint(300, 9000)}ms '
            f"({rng.randint(300, 9000)}ms including waiting). Image size: "
            f"{rng.randint(5_000_000, 400_000_000)} bytes."
        ),
        "Created": lambda: f"Created container: {app}",
        "Started": lambda: f"Started container {app}",
        "Killing": lambda: f"Stopping container {app}",
        "SuccessfulCreate": lambda: f"Created pod: {rs}-{_rand(rng, 5)}",
        "ScalingReplicaSet": lambda: (
            f"Scaled up replica set {name}-{_rand(rng, 10)} from "
            f"{(n := rng.randint(1, 8))} to {n + rng.randint(1, 4)}"
        ),
        "SuccessfulRescale": lambda: (
            f"New size: {rng.randint(3, 20)}; reason: cpu resource utilization "
            "(percentage of request) above target"
        ),
        "FailedGetResourceMetric": lambda: (
            "failed to get cpu utilization: unable to get metrics for "
            f"resource cpu: no metrics returned from resource metrics API for pod {app}-x"
        ),
        "ProvisioningFailed": lambda: (
            f'storageclass.storage.k8s.io "{rng.choice(("gp3", "fast-ssd"))}" not found'
        ),
        "ExternalProvisioning": lambda: (
            "Waiting for a volume to be created either by the external "
            'provisioner "ebs.csi.aws.com" or manually by the system administrator. If volume '
            "creation is delayed, please verify that your external provisioner is running and "
            "correctly registered."
        ),
    }
    return messages[reason]()


def _involved(
    rng: random.Random, kind: str, namespace: str, app: str, node: str
) -> tuple[dict[str, Any], str]:
    if kind == "Node":
        ref: dict[str, Any] = {"kind": "Node", "name": node, "uid": node}
        return ref, node
    rs_hash = _rand(rng, rng.choice((9, 10)))
    name = {
        "Pod": f"{app}-{rs_hash}-{_rand(rng, 5)}",
        "ReplicaSet": f"{app}-{rs_hash}",
        "Deployment": app,
        "HorizontalPodAutoscaler": app,
        "PersistentVolumeClaim": f"data-{app}-{rng.randint(0, 2)}",
    }[kind]
    ref = {
        "kind": kind,
        "namespace": namespace,
        "name": name,
        "uid": _uid(rng),
        "apiVersion": API_VERSIONS[kind],
        "resourceVersion": str(rng.randint(100_000, 99_999_999)),
    }
    return ref, name


def _managed_fields(style: Style, manager: str, moment: datetime.datetime) -> list[Any]:
    if style == "core":
        fields: dict[str, Any] = {
            "f:count": {},
            "f:firstTimestamp": {},
            "f:involvedObject": {},
            "f:lastTimestamp": {},
            "f:message": {},
            "f:reason": {},
            "f:reportingComponent": {},
            "f:reportingInstance": {},
            "f:source": {"f:component": {}, "f:host": {}},
            "f:type": {},
        }
        api_version = "v1"
    else:
        fields = {
            "f:action": {},
            "f:eventTime": {},
            "f:note": {},
            "f:reason": {},
            "f:regarding": {},
            "f:reportingController": {},
            "f:reportingInstance": {},
            "f:type": {},
        }
        api_version = "events.k8s.io/v1"
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": api_version,
            "time": _time(moment),
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
    ]


def _scenario(rng: random.Random, reason: str | None, kind: str | None) -> tuple[str, str, str]:
    """(reason, type, kind) of a pinned reason and/or kind: drawn among the rows of
    ``SCENARIOS`` that match, or Warning for a pair the table lacks (OOMKilling of a Pod)."""
    if reason is not None and reason not in REASONS:
        raise ValueError(f"no Event scenario has reason {reason!r}")
    if kind is not None and kind not in API_VERSIONS:
        raise ValueError(f"no Event scenario is about a {kind!r}")
    rows = [row for row in SCENARIOS if reason in (None, row[0]) and kind in (None, row[2])]
    if not rows:
        assert reason is not None and kind is not None
        return reason, "Warning", kind
    drawn, event_type, drawn_kind, _ = rng.choices(rows, weights=[row[3] for row in rows])[0]
    return drawn, event_type, drawn_kind


def make_event(
    rng: random.Random,
    *,
    namespace: str | None = None,
    i: int = 0,
    style: Style | None = None,
    now: datetime.datetime | None = None,
    reason: str | None = None,
    kind: str | None = None,
    name: str | None = None,
    count: int | None = None,
) -> dict[str, Any]:
    """A realistic core/v1 Event as a client would create it (no uid/resourceVersion yet).

    ``now`` is when it happened; by default a fixed epoch plus ``i`` seconds, so the result is
    a pure function of the generator's state and the arguments.

    A test that needs exact labels pins what is otherwise drawn: ``reason``, the involved
    object's ``kind`` and ``name`` (the message and the reporter follow them), and ``count``,
    how often it has happened so far (core/v1 ``count``; events.k8s.io a ``series`` from 2,
    none at 1).
    """
    moment = now if now is not None else EPOCH + datetime.timedelta(seconds=i)
    if reason is None and kind is None:
        reason, event_type, kind, _ = rng.choices(SCENARIOS, weights=_WEIGHTS)[0]
    else:
        reason, event_type, kind = _scenario(rng, reason, kind)
    if style is None:
        style = "events.k8s.io" if reason in ("FailedScheduling", "Scheduled") else "core"
        if rng.random() < 0.05:
            style = "events.k8s.io" if style == "core" else "core"
    app = rng.choice(APPS)
    node = rng.choice(NODES)
    if kind == "Node" and name is not None:
        node = name
    if namespace is None:
        namespace = "default" if kind == "Node" else rng.choice(NAMESPACES)
    involved, involved_name = _involved(rng, kind, namespace, app, node)
    if name is not None:
        involved["name"] = involved_name = name
    if kind == "Pod" and reason in ("BackOff", "Pulling", "Pulled", "Created", "Started",
                                    "Killing", "Unhealthy", "Failed"):  # fmt: skip
        involved["fieldPath"] = f"spec.containers{{{app}}}"
    component, action = REPORTERS.get(reason, ("kubelet", reason))
    host = node if component in ("kubelet", "kernel-monitor") else ""
    unix_nanos = int(moment.timestamp()) * 1_000_000_000 + rng.randrange(1_000_000_000)
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{involved_name}.{unix_nanos:x}",
            "namespace": namespace,
            "managedFields": _managed_fields(
                style, "kube-scheduler" if component == "default-scheduler" else component, moment
            ),
        },
        "involvedObject": involved,
        "reason": reason,
        "message": _message(rng, reason, kind, app, involved_name, namespace, node),
        "type": event_type,
    }
    if style == "core":
        if count is None:
            count = rng.choice((1, 1, 1, 1, 2, 3, 5, 12))
        first = moment - datetime.timedelta(seconds=(count - 1) * rng.randint(10, 300))
        event["source"] = (
            {"component": component, "host": host} if host else {"component": component}
        )
        event["firstTimestamp"] = _time(first)
        event["lastTimestamp"] = _time(moment)
        event["count"] = count
        event["eventTime"] = None
        # client-go's recorder fills reportingComponent from source.component (seen on 1.32
        # and 1.37: tests/data/real-events), reportingInstance from the host, if any
        event["reportingComponent"] = component
        event["reportingInstance"] = host if component == "kubelet" else ""
    else:
        event["source"] = {}
        event["firstTimestamp"] = None
        event["lastTimestamp"] = None
        event["eventTime"] = _micro(moment)
        event["action"] = action
        event["reportingComponent"] = component
        event["reportingInstance"] = f"{component}-{node}"
        repeated = rng.random() < 0.3 if count is None else count > 1
        if repeated:
            later = moment + datetime.timedelta(seconds=rng.randint(30, 900))
            repeats = rng.randint(2, 40) if count is None else count
            event["series"] = {"count": repeats, "lastObservedTime": _micro(later)}
    return event


class EventTarget(Protocol):
    """Where a workload writes: the simulated API server (a real kube-apiserver is written
    through HTTP by the e2e tier's writer, which draws from the same ``Workload``)."""

    def create_event(self, obj: dict[str, Any]) -> dict[str, Any]: ...

    def bump_count(self, namespace: str, name: str) -> dict[str, Any]: ...


class Workload:
    """The one source of Events for the demo, the benchmark, the soak and the tests: a seeded
    sequence of new Events (:func:`make_event`) and, with ``bump_ratio``, repeats of a recent
    one (a count bump, as client-go's recorder makes), written to ``target``; the id
    (``<uid>/<resourceVersion>``, the CloudEvent id and ``Nats-Msg-Id``) of every version
    written is kept in ``ids``, the newest of each Event in ``latest``.

    ``now`` stamps new Events (default: the fixed epoch of :func:`make_event`, so the sequence
    is a function of ``seed``); ``namespaces``, ``kinds`` and ``style`` narrow what is drawn.
    The draw (``draw_event``, ``draw_repeat``) is apart from the write (``create``, ``bump``),
    so a writer to another server (tests/e2e/writer.py) reuses the draw and the record.
    """

    def __init__(
        self,
        target: EventTarget | None = None,
        seed: int = 0,
        *,
        bump_ratio: float = 0.3,
        namespaces: list[str] | tuple[str, ...] | None = None,
        kinds: tuple[str, ...] | None = None,
        style: Style | None = None,
        now: Callable[[], datetime.datetime] | None = None,
        recent: int = 64,
        rate: float | None = None,
    ) -> None:
        self.target = target
        self.rate = rate  # the default of ``write``
        self.rng = random.Random(seed)
        self.bump_ratio = bump_ratio
        self.namespaces = namespaces
        self.kinds = kinds
        self.style = style
        self.now = now
        self.recent: collections.deque[tuple[str, str]] = collections.deque(maxlen=recent)
        self.ids: list[str] = []
        self.latest: dict[str, str] = {}  # uid -> newest id
        self.stats = WorkloadStats()
        self.n = 0  # Events drawn

    # ------------------------------------------------------------------ the draw

    def draw_event(
        self,
        namespace: str | None = None,
        *,
        style: Style | None = None,
        reason: str | None = None,
        kind: str | None = None,
        name: str | None = None,
        count: int | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """The next new Event; ``style`` (default ``self.style``) and the pins of
        :func:`make_event` (``reason``, ``kind``, ``name``, ``count``) narrow the draw,
        ``fields`` replace top-level fields (``type="Normal"``)."""
        while True:
            self.n += 1
            if namespace is None and self.namespaces:
                chosen: str | None = self.rng.choice(self.namespaces)
            else:
                chosen = namespace
            now = self.now() if self.now is not None else None
            event = make_event(
                self.rng,
                namespace=chosen,
                i=self.n,
                style=style or self.style,
                now=now,
                reason=reason,
                kind=kind,
                name=name,
                count=count,
            )
            if self.kinds is None or reason is not None or kind is not None:
                break  # a pinned draw wins over ``kinds``
            if event["involvedObject"]["kind"] in self.kinds:
                break
        event.update(fields)
        return event

    def draw_repeat(self, bump_ratio: float | None = None) -> tuple[str, str] | None:
        """(namespace, name) of a recent Event to repeat, or None: draw a new one."""
        ratio = self.bump_ratio if bump_ratio is None else bump_ratio
        if self.recent and self.rng.random() < ratio:
            return self.rng.choice(self.recent)
        return None

    # ------------------------------------------------------------------ the record

    def record(self, obj: dict[str, Any], *, created: bool) -> dict[str, Any]:
        """Remember a version the server wrote (``obj`` as it answered); returns it."""
        meta = obj["metadata"]
        mid = f"{meta['uid']}/{meta['resourceVersion']}"
        self.ids.append(mid)
        self.latest[meta["uid"]] = mid
        if created:
            self.stats.created += 1
            self.recent.append((meta["namespace"], meta["name"]))
        else:
            self.stats.bumped += 1
        return obj

    def forget(self, namespace: str, name: str) -> None:
        """An Event that is gone (expired, deleted): never repeated again."""
        with contextlib.suppress(ValueError):
            self.recent.remove((namespace, name))

    # ------------------------------------------------------------------ the write

    def _target(self) -> EventTarget:
        if self.target is None:
            raise RuntimeError("this workload has no target to write to")
        return self.target

    def create(self, namespace: str | None = None, **fields: Any) -> dict[str, Any]:
        """Write a new Event (ValueError from the server: the name exists)."""
        return self.record(
            self._target().create_event(self.draw_event(namespace, **fields)), created=True
        )

    def bump(self, namespace: str | None = None, name: str | None = None) -> dict[str, Any]:
        """Repeat an Event (by default a recent one); KeyError: it is gone."""
        if namespace is None or name is None:
            namespace, name = self.rng.choice(self.recent)
        return self.record(self._target().bump_count(namespace, name), created=False)

    def step(self, bump_ratio: float | None = None, **fields: Any) -> dict[str, Any] | None:
        """One operation: a repeat of a recent Event (one expired meanwhile is forgotten and a
        new Event written instead) or a new Event; None when the new Event's name was taken
        (the same seed written twice to one server: counted in ``stats.conflicts``)."""
        repeat = self.draw_repeat(bump_ratio)
        if repeat is not None:
            try:
                return self.bump(*repeat)
            except KeyError:  # expired by the TTL meanwhile
                self.forget(*repeat)
        try:
            return self.create(**fields)
        except ValueError:
            self.stats.conflicts += 1
            return None

    async def write(
        self,
        n: int,
        rate: float | None = None,
        bump_ratio: float | None = None,
        **fields: Any,
    ) -> list[str]:
        """``n`` operations at ``rate`` per second (default ``self.rate``; None: as fast as
        possible, yielding to the loop every 200); returns the ids of the versions written."""
        rate = self.rate if rate is None else rate
        first = len(self.ids)
        started = time.monotonic()
        for index in range(n):
            self.step(bump_ratio, **fields)
            if rate:
                delay = started + (index + 1) / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                elif index % 200 == 199:
                    await asyncio.sleep(0)
            elif index % 200 == 199:
                await asyncio.sleep(0)
        self.stats.elapsed += time.monotonic() - started
        return self.ids[first:]


async def run_workload(
    sim: SimApiServer,
    *,
    total: int,
    rate: float | None,
    bump_ratio: float = 0.3,
    seed: int = 0,
    namespaces: list[str] | tuple[str, ...] | None = None,
    clock: Callable[[], datetime.datetime] | None = None,
) -> WorkloadStats:
    """Write ``total`` operations to ``sim``: new Events, or with ``bump_ratio`` a repeat of a
    recent one (count+1). ``rate`` is operations per second (None: as fast as possible).

    The sequence is a function of ``seed`` (and of ``clock``, which stamps the Events; by default
    the fixed epoch used by :func:`make_event`).
    """
    workload = Workload(sim, seed, bump_ratio=bump_ratio, namespaces=namespaces, now=clock)
    await workload.write(total, rate)
    return workload.stats
