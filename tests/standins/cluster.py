"""A living cluster for the e2e tier: the control plane of controlplane.py plus the components
that write Kubernetes' Events in production, started from the test on loopback (as envtest
starts its control plane):

* **kube-scheduler** writes ``events.k8s.io/v1`` Events through client-go's new event
  broadcaster: ``Scheduled``, and ``FailedScheduling`` as a *series* (a repeat within the
  broadcaster's 6 minutes sets ``series.count`` and ``series.lastObservedTime`` by PATCH; later
  repeats are counted in memory and written at the next 6-minute refresh).
* **kube-controller-manager** (every default controller) writes core/v1 Events through
  ``record.EventBroadcaster`` and its correlator: ``ScalingReplicaSet``, ``SuccessfulCreate``,
  ``SuccessfulDelete``, ``NodeNotReady``, ``TaintManagerEviction``...; a repeat bumps ``count``
  by PATCH, and more than 10 similar Events in 10 minutes become one "(combined from similar
  events)" Event that is bumped in turn.
* **kwok** plays the kubelets of three fake nodes (annotation ``kwok.x-k8s.io/node=fake``):
  node leases, Pod lifecycles and failures from the stages in ``e2e/kwok/stages.yaml``; the
  Events of its stages go through a client-go recorder as a kubelet's do (``Started``,
  ``BackOff`` for a crash loop).

Each component uses the admin kubeconfig (a real cluster gives each its own identity; the
Events they write do not depend on it). The apiserver keeps the ServiceAccount admission plugin
here (the controller-manager creates every namespace's ``default`` ServiceAccount), and runs
with the watch cache as usual: for Events that means none (``events: 0``), so no bookmarks.

The controller-manager's node lifecycle controller watches the nodes' Leases: kwok renews them
every 5 s (``--node-lease-duration-seconds=20``) and ``--node-monitor-grace-period=16s``. A node
whose kubelet stops reporting (:meth:`LivingCluster.silence`: kwok lets go of it) becomes
Ready=Unknown: the controller writes ``NodeNotReady`` on the Node and its Pods, taints it
``unreachable:NoExecute``, and Pods without a longer toleration are evicted
(``TaintManagerEviction``). kwok's own chaos stage for nodes (``node-not-ready``) is not used:
it reports Ready=False like a live kubelet, and the controller writes ``NodeNotReady`` only for
a silent one (a live kubelet writes its own, which kwok does not).
"""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from tests.standins.controlplane import (
    REPO,
    ControlPlane,
    ControlPlaneError,
    _kill,
    _tail,
)
from tests.support import NotMet, eventually_sync, free_port

STAGES = REPO / "e2e" / "kwok" / "stages.yaml"
MANAGED_LABEL = "kwok.x-k8s.io/node"
CRASHLOOP_LABEL = "crashloop.e2e.k8s-event-bridge.io"
# a Pod with these is evicted 2 s after its node is lost (the default tolerations are 300 s)
BRIEF_NODE_TOLERATIONS = [
    {
        "key": f"node.kubernetes.io/{taint}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 2,
    }
    for taint in ("not-ready", "unreachable")
]


def deployment(
    name: str,
    namespace: str,
    replicas: int,
    *,
    labels: dict[str, str] | None = None,
    pod_spec: dict[str, Any] | None = None,
    image: str = "registry.invalid/app:1",
    cpu: str = "100m",
) -> dict[str, Any]:
    """A Deployment of ``replicas`` Pods labelled ``app=<name>``, one container asking for
    ``cpu``, rolled out one Pod at a time."""
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": image, "resources": {"requests": {"cpu": cpu}}}],
        **(pod_spec or {}),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {"metadata": {"labels": {"app": name, **(labels or {})}}, "spec": spec},
        },
    }


class Component:
    """One more process of the cluster (scheduler, controller-manager, kwok)."""

    def __init__(self, name: str, args: list[str], workdir: Path, health: str | None) -> None:
        self.name = name
        self.args = args
        self.log_path = workdir / f"{name}.log"
        self.health = health
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60) -> None:
        if self.running:
            return
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.args,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        if self.health is None:
            return
        # its own serving certificate is self-signed: /healthz is all this asks of it
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        health = self.health

        def healthy() -> bool:
            self.check()
            with urllib.request.urlopen(health, context=ctx, timeout=2) as r:
                return bool(r.status == 200)

        try:
            eventually_sync(healthy, timeout, 0.2, retry_on=(OSError,))
        except NotMet:
            raise ControlPlaneError(
                f"{self.name} not healthy after {timeout}s:\n{_tail(self.log_path)}"
            ) from None

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with {self.proc.returncode}:\n{_tail(self.log_path)}"
            )

    def stop(self) -> None:
        _kill(self.proc)
        self.proc = None


class LivingCluster(ControlPlane):
    """etcd + kube-apiserver + kube-scheduler + kube-controller-manager + kwok and ``nodes``
    fake nodes, all Ready when :meth:`start` returns."""

    LIVING = True

    def __init__(self, *, nodes: int = 3, **kwargs: Any) -> None:
        kwargs.setdefault("service_account_admission", True)
        super().__init__(**kwargs)
        self.node_names = [f"kwok-node-{i}" for i in range(1, nodes + 1)]
        kubeconfig = str(self.kubeconfig)
        delegated = [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
        ]
        sched_port, kcm_port = free_port(), free_port()
        self.scheduler = Component(
            "kube-scheduler",
            [
                str(self.bin / "kube-scheduler"),
                *delegated,
                f"--secure-port={sched_port}",
                f"--cert-dir={self.dir / 'kube-scheduler-certs'}",
            ],
            self.dir,
            f"https://127.0.0.1:{sched_port}/healthz",
        )
        self.controller_manager = Component(
            "kube-controller-manager",
            [
                str(self.bin / "kube-controller-manager"),
                *delegated,
                f"--secure-port={kcm_port}",
                f"--cert-dir={self.dir / 'kube-controller-manager-certs'}",
                f"--service-account-private-key-file={self.certs.sa_key}",
                f"--root-ca-file={self.certs.ca_cert}",
                "--use-service-account-credentials=false",
                "--controllers=*",
                # kwok renews each node's Lease every 5 s: a node silent for 16 s is NotReady
                "--node-monitor-grace-period=16s",
            ],
            self.dir,
            f"https://127.0.0.1:{kcm_port}/healthz",
        )
        self.kwok = Component(
            "kwok",
            [
                str(self.bin / "kwok"),
                f"--kubeconfig={kubeconfig}",
                f"--config={STAGES}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-label-selector={MANAGED_LABEL}=fake",
                "--node-lease-duration-seconds=20",
                "--cidr=10.244.0.0/16",
                "--node-ip=10.1.0.1",
                f"--server-address=127.0.0.1:{free_port()}",
            ],
            self.dir,
            None,
        )
        self.components = [self.scheduler, self.controller_manager, self.kwok]

    def start(self) -> LivingCluster:
        super().start()
        try:
            for c in self.components:
                c.start()
            self.add_nodes()
            self.wait_for(self._ready, "every node Ready and the default ServiceAccount", 90)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for c in self.components:
            c.stop()
        super().stop()

    # -- nodes

    def node_manifest(self, name: str) -> dict[str, Any]:
        resources = {"cpu": "4", "memory": "8Gi", "pods": "110"}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    MANAGED_LABEL: "fake",
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    "topology.kubernetes.io/zone": "e2e-a",
                },
            },
            "status": {"allocatable": resources, "capacity": resources},
        }

    def add_nodes(self, names: list[str] | None = None) -> None:
        items = [self.node_manifest(n) for n in names or self.node_names]
        self.apply({"apiVersion": "v1", "kind": "List", "items": items})

    def silence(self, name: str) -> None:
        """The node's kubelet stops reporting: kwok lets go of it (no more Lease renewals, no
        status), as when a node loses power or its network."""
        self.kubectl("label", "node", name, f"{MANAGED_LABEL}-")

    def revive(self, name: str) -> None:
        """Its kubelet reports again."""
        self.kubectl("label", "node", name, f"{MANAGED_LABEL}=fake")

    def node_ready(self, name: str) -> bool:
        node = self.get_json("node", name)
        for cond in node.get("status", {}).get("conditions") or []:
            if cond.get("type") == "Ready":
                return bool(cond.get("status") == "True")
        return False

    def _ready(self) -> bool:
        if not all(self.node_ready(n) for n in self.node_names):
            return False
        return self.kubectl("get", "sa", "default", "-n", "default", check=False).returncode == 0

    # -- helpers for tests

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        """A namespace (with ``labels``) whose ``default`` ServiceAccount exists (the
        controller-manager makes it; Pods are refused until then)."""
        self.kubectl("create", "namespace", name)
        if labels:
            self.kubectl("label", "namespace", name, *(f"{k}={v}" for k, v in labels.items()))
        self.wait_for(
            lambda: self.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0,
            f"ServiceAccount default in {name}",
        )
        return name

    def apply(self, doc: dict[str, Any] | str) -> None:
        text = doc if isinstance(doc, str) else json.dumps(doc)
        self.kubectl("apply", "-f", "-", input=text)

    def pods(self, namespace: str, app: str) -> list[dict[str, Any]]:
        return list(self.get_json("pods", "-n", namespace, "-l", f"app={app}")["items"])

    def running(self, namespace: str, app: str) -> list[dict[str, Any]]:
        """The Pods of ``app`` that run and are not being deleted."""
        return [
            p
            for p in self.pods(namespace, app)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]

    def get_json(self, *args: str) -> dict[str, Any]:
        out = self.kubectl("get", *args, "-o", "json")
        return json.loads(out.stdout)  # type: ignore[no-any-return]

    def wait_for(self, check: Any, what: str, timeout: float = 60) -> None:
        """Poll ``check()`` (a plain function) until true; a dead component fails at once."""

        def met() -> Any:
            for c in self.components:
                c.check()
            return check()

        try:
            eventually_sync(met, timeout, 0.25, what=what, retry_on=())
        except NotMet:
            logs = "\n".join(f"--- {c.name}\n{_tail(c.log_path, 15)}" for c in self.components)
            raise ControlPlaneError(
                f"living cluster: not {what} after {timeout}s\n{logs}"
            ) from None
