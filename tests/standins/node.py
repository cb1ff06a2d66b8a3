"""A real node for the node tier: its own control plane on the host's address, containerd, CNI,
a kubelet and kube-proxy, the application image imported; :meth:`Node.stop` undoes all of it.

What :meth:`Node.start` runs, each process with its log in one log directory, everything else
under one work directory:

* **etcd and kube-apiserver** (tests/standins/controlplane.py's ``Etcd`` and ``ApiServer``) on the
  host's address and a free port, so that Pods reach it through the ``kubernetes`` Service (its
  endpoint is the host's address): ``--authorization-mode=Node,RBAC``, ``NodeRestriction``, the
  ServiceAccount admission plugin on (the ``kube-api-access`` projected volume is injected), the
  service-account issuer and keys, the admin's client cert to talk to the kubelet.
* **kube-controller-manager** (the default controllers: service-account tokens, the root CA
  publisher writing ``kube-root-ca.crt`` into each namespace, deployments, replicasets,
  statefulsets, the garbage collector, the namespace controller...) and **kube-scheduler**.
* **containerd** (Debian's) with its own config, root, state, socket and runc root
  (node_configs.py: ``restrict_oom_score_adj = true`` is required here). The pause image:
  ``build/pause/linux/pause.c`` of the k8s.io/kubernetes module (the Go module cache) built with
  ``gcc -static``, written as an image archive, imported. The application image's archive
  (``tools.image.build_image()``) is imported with ``ctr -n k8s.io images import`` while the
  control plane starts.
* **CNI**: a bridge with host-local addresses on a private range; routes to the Pods, the
  Services and the host only.
* **kubelet** (node identity by a client cert ``system:node:<name>`` in ``system:nodes``, no
  bootstrap; cgroup v1 allowed, cgroupfs, webhook authentication and authorization, free ports)
  and **kube-proxy** (iptables), both from ``e2e/build-control-plane.sh --living --node newest``.

One node per machine: a machine-wide ``flock`` (:data:`LOCK`) makes a second one wait. The
changes to the host, their record and their undoing (also of a run that died before its
teardown) are tests/standins/node_host.py's.

:meth:`Node.stop`, in order: the controllers stopped and every Pod deleted (the kubelet stops its
containers and tears down its sandbox, network and volumes), the kubelet, kube-proxy and
``kube-proxy --cleanup``, containerd's leftover tasks, containerd and its shims, the scheduler
and controller-manager, kube-apiserver and etcd (each by its pid), then the host's changes
(``Host.undo``), the work directory, the log directory (kept when a test failed or
``K8S_EVENT_BRIDGE_NODE_KEEP=1``) and the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from tests.standins import gotools
from tests.standins import node_configs as configs
from tests.standins import node_host as host
from tests.standins.controlplane import ApiServer, Certs, Etcd, ensure_binaries, kubernetes_version
from tests.standins.node_host import Daemon, Host, NodeError, run, tail
from tests.support import NotMet, eventually_sync, free_port, write_kubeconfig

LOCK = Path("/run/lock/k8s-event-bridge-node.lock")
NODE_NAME = "bridge-node"
KEEP_ENV = "K8S_EVENT_BRIDGE_NODE_KEEP"


class ImageLike(Protocol):
    """What the node needs of ``tools.image.Image``."""

    @property
    def tag(self) -> str: ...

    @property
    def archive(self) -> Path: ...


def _go() -> str:
    for found in (shutil.which("go"), "/usr/local/go/bin/go"):
        if found and os.access(found, os.X_OK):
            return found
    raise NodeError("go is not installed (the pause image is built from the kubernetes module)")


def pause_image(workdir: Path, version: str) -> Path:
    """The pause image's archive, from pause.c of k8s.io/kubernetes@``version`` (the module
    the kubelet is built from, in the Go module cache)."""
    mod = json.loads(run([_go(), "mod", "download", "-json", f"k8s.io/kubernetes@{version}"]))
    source = Path(mod["Dir"]) / "build" / "pause" / "linux" / "pause.c"
    out = workdir / "pause"
    # as kubernetes' build/pause/Makefile, without its -Werror (a newer gcc's warning is no
    # reason to fail a test run)
    run(
        [
            "gcc",
            "-Os",
            "-Wall",
            "-static",
            f"-DVERSION={version}-local",
            "-o",
            str(out),
            str(source),
        ]
    )
    run(["strip", str(out)], check=False)
    return configs.pause_archive(workdir / "pause.tar", out.read_bytes())


class Node:
    """A real node (see the module docstring): ``Node(image).start()`` ... ``stop()``, or a
    context manager. ``say`` gets a line per step: where the logs are, how long each took."""

    def __init__(
        self,
        image: ImageLike | None = None,
        *,
        version: str | None = None,
        bin_path: Path | None = None,
        apiserver_args: Sequence[str] = (),
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.version = version or kubernetes_version("newest")
        self._bin_path = bin_path
        self.image_source = image
        self.image = image.tag if image else configs.PAUSE_TAG  # the tag Pods name
        self.apiserver_args = list(apiserver_args)
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.host = ""  # the address Pods reach the host (API server, nats-server) at
        self.dir = Path()
        self.logs = Path()
        self.daemons: list[Daemon] = []
        self.timings: dict[str, float] = {}
        self.keep_logs = os.environ.get(KEEP_ENV) == "1"
        self._lock: int | None = None
        self._host: Host | None = None
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Node:
        t0 = time.monotonic()
        host.ensure_packages(self.say)
        self.bin = self._bin_path or ensure_binaries(self.version, living=True, node=True)
        self._take_lock()
        self._started = True
        try:
            host.recover(self.say)
            self._start()
        except BaseException:
            self.keep_logs = True
            self.say(f"node: start failed\n{self.log_tails(20)}")
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - t0
        self.say(f"node: {NODE_NAME} Ready with {self.image} in {self.timings['start']:.0f}s")
        return self

    def _take_lock(self) -> None:
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.say(f"node: another node runs on this machine; waiting for {LOCK}")
            fcntl.flock(fd, fcntl.LOCK_EX)
        self._lock = fd

    def _start(self) -> None:
        self.host = host.address()
        self.dir = Path(tempfile.mkdtemp(prefix="k8s-event-bridge-node-"))
        self.logs = Path(tempfile.mkdtemp(prefix="k8s-event-bridge-node-logs-"))
        self.socket = self.dir / "containerd" / "containerd.sock"
        self._host = Host.snapshot(self.dir, self.socket, self.logs)
        self.say(
            f"node: work dir {self.dir}; logs in {self.logs} (kubelet.log, containerd.log, "
            "kube-apiserver.log, etcd.log, kube-controller-manager.log, kube-scheduler.log, "
            f"kube-proxy.log); admin kubeconfig {self.dir / 'kube-apiserver.kubeconfig'}"
        )
        self._write_pki()
        self._step("pause image built", lambda: pause_image(self.dir, self.version))
        self._step("containerd", self._start_containerd)
        self._step("pause image imported", lambda: self.import_image(self.dir / "pause.tar"))
        importer = None
        if self.image_source is not None:
            importer = _Background(lambda a=self.image_source.archive: self.import_image(a))
        self._step("control plane", self._start_control_plane)
        self._step("kubelet, node Ready", self._start_kubelet)
        self._step("kube-proxy", self._start_kube_proxy)
        if importer is not None:
            self._step(f"image {self.image} imported", importer.join)
        self.wait_for(
            lambda: self.kubectl("get", "sa", "default", "-n", "default", check=False),
            "the default ServiceAccount",
        )

    def _step(self, what: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        result = fn()
        self.timings[what] = time.monotonic() - t0
        self.say(f"node: {what} ({self.timings[what]:.1f}s)")
        return result

    def _daemon(self, name: str, argv: Sequence[Any]) -> Daemon:
        d = Daemon(name, argv, self.logs).start()
        self.daemons.append(d)
        assert self._host is not None
        self._host.started(d)
        return d

    # ------------------------------------------------------------------ parts

    def _write_pki(self) -> None:
        self.certs = Certs(self.dir / "pki", hosts=[self.host])
        self.node_cert = self.certs.issue(
            "node", f"system:node:{NODE_NAME}", organization="system:nodes"
        )
        self.kubelet_serving = self.certs.issue(
            "kubelet-serving", NODE_NAME, server_ips=[self.host], server_names=[NODE_NAME]
        )

    def _start_containerd(self) -> None:
        d = self.socket.parent
        cni = self.dir / "cni"
        for sub in (d, cni / "net.d", cni / "ipam"):
            sub.mkdir(parents=True)
        network = configs.cni_config(self.host, host.BRIDGE, cni / "ipam")
        (cni / "net.d" / "10-node.conflist").write_text(json.dumps(network, indent=2))
        config = d / "config.toml"
        config.write_text(configs.containerd_config(d, self.socket, host.CNI_BIN, cni / "net.d"))
        self.containerd = self._daemon("containerd", ["containerd", "--config", config])

        def up() -> bool:
            self.containerd.check()
            done = subprocess.run(self._ctr("version"), capture_output=True, check=False)
            return done.returncode == 0

        self._eventually(up, "containerd answering on its socket", 30)

    def _start_control_plane(self) -> None:
        c = self.certs
        self.etcd = Etcd(self.bin / "etcd", self.dir)
        self.etcd.log_path = self.logs / "etcd.log"
        self.apiserver = ApiServer(
            self.bin / "kube-apiserver",
            self.dir,
            "kube-apiserver",
            c,
            self.etcd,
            event_ttl="1h",
            watch_cache=True,
            issuer=None,
            extra_args=[
                f"--kubelet-client-certificate={c.admin_cert}",
                f"--kubelet-client-key={c.admin_key}",
                f"--kubelet-certificate-authority={c.ca_cert}",
                "--kubelet-preferred-address-types=InternalIP",
                "--profiling=false",
                *self.apiserver_args,
            ],
            kubectl_binary=self.bin / "kubectl",
            service_account_admission=True,
            address=self.host,
            authorization_mode="Node,RBAC",
            admission_plugins=["NodeRestriction"],
        )
        self.apiserver.log_path = self.logs / "kube-apiserver.log"
        self.etcd.start()
        self._record(self.etcd.proc)
        self.apiserver.start()
        self._record(self.apiserver.proc)
        self.kubeconfig = self.apiserver.kubeconfig
        self.node_kubeconfig = write_kubeconfig(
            self.dir / "node.kubeconfig",
            self.apiserver.url,
            ca_file=c.ca_cert,
            user=f"system:node:{NODE_NAME}",
            client_cert=self.node_cert[0],
            client_key=self.node_cert[1],
            cluster="node",
        )
        kc = str(self.kubeconfig)
        delegated = [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--profiling=false",
        ]
        kcm_port, sched_port = free_port(), free_port()
        self.controller_manager = self._daemon(
            "kube-controller-manager",
            [
                self.bin / "kube-controller-manager",
                *delegated,
                f"--secure-port={kcm_port}",
                f"--cert-dir={self.dir / 'kcm-certs'}",
                f"--service-account-private-key-file={c.sa_key}",
                f"--root-ca-file={c.ca_cert}",
                f"--cluster-signing-cert-file={c.ca_cert}",
                f"--cluster-signing-key-file={c.ca_key}",
                "--use-service-account-credentials=false",
                f"--service-cluster-ip-range={configs.SERVICE_CIDR}",
            ],
        )
        self.scheduler = self._daemon(
            "kube-scheduler",
            [
                self.bin / "kube-scheduler",
                *delegated,
                f"--secure-port={sched_port}",
                f"--cert-dir={self.dir / 'scheduler-certs'}",
            ],
        )
        for daemon, port in ((self.controller_manager, kcm_port), (self.scheduler, sched_port)):
            self._healthy(daemon, f"https://127.0.0.1:{port}/healthz")

    def _record(self, proc: subprocess.Popen[bytes] | None) -> None:
        """Record a process the e2e classes started (etcd, kube-apiserver) for a recovery."""
        if proc is not None and self._host is not None:
            d = Daemon("", [], self.logs)
            d.proc = proc
            self._host.started(d)

    def _start_kubelet(self) -> None:
        self.kubelet_root = self.dir / "kubelet"
        self.kubelet_root.mkdir()
        config = configs.kubelet_config(
            host=self.host,
            port=free_port(),
            healthz_port=free_port(),
            socket=self.socket,
            serving=self.kubelet_serving,
            client_ca=self.certs.ca_cert,
            pod_logs=self.dir / "pod-logs",
        )
        path = self.dir / "kubelet-config.json"
        path.write_text(json.dumps(config, indent=2))
        self.kubelet = self._daemon(
            "kubelet",
            [
                self.bin / "kubelet",
                f"--config={path}",
                f"--kubeconfig={self.node_kubeconfig}",
                f"--root-dir={self.kubelet_root}",
                f"--cert-dir={self.dir / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={self.host}",
                "--v=2",
            ],
        )
        self.wait_for(self.node_ready, f"node {NODE_NAME} Ready", 120)

    def _start_kube_proxy(self) -> None:
        config = configs.kube_proxy_config(
            host=self.host,
            node_name=NODE_NAME,
            kubeconfig=self.kubeconfig,
            metrics_port=free_port(),
            healthz_port=free_port(),
        )
        path = self.dir / "kube-proxy-config.json"
        path.write_text(json.dumps(config, indent=2))
        argv = [self.bin / "kube-proxy", f"--config={path}", "--v=2"]
        self.kube_proxy = self._daemon("kube-proxy", argv)

        def synced() -> bool:
            rules = run(["iptables", "-t", "nat", "-S", "KUBE-SERVICES"], check=False)
            return f"{configs.KUBERNETES_SERVICE_IP}/32" in rules

        self.wait_for(synced, "kube-proxy's rules for the kubernetes Service", 60)

    def _healthy(self, daemon: Daemon, url: str) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False  # its own self-signed serving cert: /healthz is all we ask
        ctx.verify_mode = ssl.CERT_NONE

        def ok() -> bool:
            daemon.check()
            with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
                return bool(r.status == 200)

        self._eventually(ok, f"{daemon.name} healthy", 60, retry_on=(OSError,))

    # ------------------------------------------------------------------ waiting

    def _eventually(
        self,
        check: Callable[[], Any],
        what: str,
        timeout: float,
        retry_on: tuple[type[BaseException], ...] = (),
    ) -> None:
        try:
            eventually_sync(check, timeout, 0.25, what=what, retry_on=retry_on)
        except NotMet:
            raise NodeError(f"node: not {what} after {timeout}s\n{self.log_tails(15)}") from None

    def wait_for(self, check: Callable[[], Any], what: str, timeout: float = 120) -> None:
        """Poll ``check()`` until truthy; a dead process of the node fails it at once."""

        def met() -> Any:
            for d in self.daemons:
                d.check()
            return check()

        self._eventually(met, what, timeout)

    def node_ready(self) -> bool:
        text = self.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
        conds = json.loads(text).get("status", {}).get("conditions") or [] if text else []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    # ------------------------------------------------------------------ driving

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> str:
        """kubectl as the admin; its stdout. Raises ``KubectlError`` (controlplane.py)
        on failure, or with ``check=False`` returns ''."""
        done = self.apiserver.kubectl(*args, input=input, check=check, timeout=timeout)
        return done.stdout if done.returncode == 0 else ""

    def get(self, *args: str) -> dict[str, Any]:
        """``kubectl get <args> -o json``, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json"))  # type: ignore[no-any-return]

    def apply(self, doc: dict[str, Any] | str, *args: str) -> str:
        """``kubectl apply -f -`` of a manifest (a dict, or YAML or JSON text)."""
        text = doc if isinstance(doc, str) else json.dumps(doc)
        return self.kubectl("apply", *args, "-f", "-", input=text)

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> str:
        """helm (``e2e/build-go-tool.sh helm``) against this node's API server as the admin, its
        cache and config in the work directory; its stdout. Raises NodeError on failure."""
        home = self.dir / "helm"
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
            "KUBECONFIG": str(self.kubeconfig),
        }
        argv = [str(gotools.ensure("helm")), *args]
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise NodeError(f"helm {shlex.join(args)} exited {done.returncode}:\n{done.stderr}")
        return done.stdout

    def import_image(self, archive: Path) -> None:
        """Load an image archive (``docker save``'s format) into containerd for the kubelet."""
        run(["nice", "-n", "10", *self._ctr("images", "import", str(archive))])

    def ctr(self, *args: str) -> str:
        """``ctr`` on this node's containerd, in the kubelet's namespace (k8s.io)."""
        return run(self._ctr(*args))

    def _ctr(self, *args: str) -> list[str]:
        return ["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args]

    def create_namespace(self, name: str) -> str:
        """A namespace with its ``default`` ServiceAccount and ``kube-root-ca.crt`` (the
        controller-manager writes both; a Pod waits for them)."""
        self.kubectl("create", "namespace", name)
        self.wait_for(
            lambda: (
                self.kubectl("get", "sa", "default", "-n", name, check=False)
                and self.kubectl("get", "configmap", "kube-root-ca.crt", "-n", name, check=False)
            ),
            f"ServiceAccount default and kube-root-ca.crt in {name}",
        )
        return name

    def delete_namespace(self, name: str, timeout: float = 180) -> None:
        """Delete a namespace and wait until it is gone (its Pods stopped by the kubelet)."""
        self.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")
        self.wait_for(
            lambda: not self.kubectl("get", "namespace", name, "-o", "name", check=False),
            f"namespace {name} gone",
            timeout,
        )

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.get("pod", name, "-n", namespace)

    def pod_ip(self, namespace: str, name: str) -> str:
        """The Pod's address: the host reaches it directly (the bridge is the host's)."""
        return str(self.pod(namespace, name)["status"]["podIP"])

    def wait_pod(
        self, namespace: str, name: str, state: str = "Ready", timeout: float = 180
    ) -> dict[str, Any]:
        """Until the Pod is ``Ready`` (its condition) or in phase ``state`` (``Running``,
        ``Succeeded``, ``Failed``); returns it. A Pod that fails while waiting for another
        state fails this at once; the message has its status and Events."""
        found: dict[str, Any] = {}

        def there() -> bool:
            text = self.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
            if not text:
                return False
            found.update(json.loads(text))
            status = found.get("status", {})
            if status.get("phase") == "Failed" and state != "Failed":
                raise NodeError(f"pod {namespace}/{name} Failed")
            if state == "Ready":
                conds = status.get("conditions") or []
                return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
            return bool(status.get("phase") == state)

        try:
            self.wait_for(there, f"pod {namespace}/{name} {state}", timeout)
        except NodeError as e:
            raise NodeError(f"{e}\n{self.describe(namespace, name)}") from None
        return found

    def describe(self, namespace: str, name: str) -> str:
        """The Pod's status and the Events about it (a failure's message)."""
        status = self.kubectl(
            "get", "pod", name, "-n", namespace, "-o", "jsonpath={.status}", check=False
        )
        lines = [
            f"  {e.get('type')} {e.get('reason')}: {e.get('message')}"
            for e in self.events(namespace, name)
        ]
        return f"pod {namespace}/{name} status: {status}\nevents:\n" + "\n".join(lines)

    def pod_logs(
        self, namespace: str, name: str, container: str | None = None, previous: bool = False
    ) -> str:
        """The container's log as ``kubectl logs`` gives it (through the kubelet)."""
        args = ["logs", name, "-n", namespace]
        if container:
            args += ["-c", container]
        if previous:
            args.append("--previous")
        return self.kubectl(*args)

    def exec(self, namespace: str, pod: str, *command: str, container: str | None = None) -> str:
        """``kubectl exec`` (through the kubelet and containerd's stream server); stdout."""
        args = ["exec", pod, "-n", namespace, *(["-c", container] if container else [])]
        return self.kubectl(*args, "--", *command)

    def events(self, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
        """The core/v1 Events in ``namespace`` (about the object ``name`` when given), oldest
        first."""
        args = ["get", "events", "-n", namespace, "-o", "json"]
        if name:
            args.append(f"--field-selector=involvedObject.name={name}")
        text = self.kubectl(*args, check=False)
        items: list[dict[str, Any]] = json.loads(text)["items"] if text else []
        return sorted(items, key=lambda e: int(e["metadata"].get("resourceVersion", "0")))

    def container_id(self, namespace: str, pod: str, container: str) -> str:
        for s in self.pod(namespace, pod)["status"].get("containerStatuses") or []:
            if s["name"] == container and s.get("containerID") and "running" in s["state"]:
                return str(s["containerID"]).split("://", 1)[1]
        raise NodeError(f"no running container {container} in pod {namespace}/{pod}")

    def container_pid(self, namespace: str, pod: str, container: str) -> int:
        """The host pid of the running container's main process (for real signals)."""
        cid = self.container_id(namespace, pod, container)
        tasks = self.socket.parent / "state" / "io.containerd.runtime.v2.task" / "k8s.io"
        pidfile = tasks / cid / "init.pid"
        if pidfile.exists():
            return int(pidfile.read_text().strip())
        for line in self.ctr("tasks", "ls").splitlines()[1:]:
            fields = line.split()
            if fields and fields[0] == cid:
                return int(fields[1])
        raise NodeError(f"no task for container {cid} ({namespace}/{pod}/{container})")

    def restart_count(self, namespace: str, pod: str, container: str) -> int:
        for s in self.pod(namespace, pod)["status"].get("containerStatuses") or []:
            if s["name"] == container:
                return int(s.get("restartCount", 0))
        raise NodeError(f"no container {container} in pod {namespace}/{pod}")

    def pod_volume_path(self, namespace: str, pod: str, volume: str) -> Path:
        """The volume as the kubelet wrote it on the host (``<root>/pods/<uid>/volumes/<plugin>/
        <volume>``): a projected service-account token, a ConfigMap, an emptyDir."""
        uid = self.pod(namespace, pod)["metadata"]["uid"]
        found = sorted((self.kubelet_root / "pods" / uid / "volumes").glob(f"*/{volume}"))
        if not found:
            raise NodeError(f"no volume {volume} of pod {namespace}/{pod} in {self.kubelet_root}")
        return found[0]

    def log_tails(self, lines: int = 40, names: Sequence[str] = ("kubelet", "containerd")) -> str:
        """The end of the named processes' logs (a failed test's report)."""
        return "\n".join(
            f"----- {name}: {self.logs / (name + '.log')}, the last {lines} lines\n"
            f"{tail(self.logs / (name + '.log'), lines)}"
            for name in names
        )

    # ------------------------------------------------------------------ teardown

    def stop(self) -> None:
        """Undo everything :meth:`start` did, in order (the module's docstring); raises
        NodeError naming what could not be undone, after trying everything."""
        if not self._started:
            return
        problems: list[str] = []

        slow: list[str] = []

        def attempt(what: str, fn: Callable[[], Any]) -> None:
            t = time.monotonic()
            try:
                fn()
            except Exception as e:  # keep undoing the rest
                problems.append(f"{what}: {e}")
            if time.monotonic() - t >= 1:
                slow.append(f"{what} {time.monotonic() - t:.0f}s")

        t0 = time.monotonic()
        kubelet = getattr(self, "kubelet", None)
        if kubelet is not None and kubelet.running:
            attempt("deleting the Pods", self._delete_pods)
        for name in ("kubelet", "kube_proxy"):
            if (d := getattr(self, name, None)) is not None:
                attempt(f"stopping {d.name}", d.stop)
        if getattr(self, "kube_proxy", None) is not None:
            attempt(
                "kube-proxy --cleanup", lambda: run([str(self.bin / "kube-proxy"), "--cleanup"])
            )
        if (containerd := getattr(self, "containerd", None)) is not None:
            attempt("removing leftover containers", self._remove_tasks)
            attempt("stopping containerd", containerd.stop)
        for name in ("scheduler", "controller_manager"):
            if (d := getattr(self, name, None)) is not None:
                attempt(f"stopping {d.name}", d.stop)
        if getattr(self, "apiserver", None) is not None:
            attempt("stopping kube-apiserver", self.apiserver.stop)
            attempt("stopping etcd", self.etcd.stop)
        if (recorded := self._host) is not None:
            attempt("stopping containerd's shims", recorded.kill_shims)
            attempt("undoing the host's changes", lambda: problems.extend(recorded.undo()))
        if self.logs != Path():
            if self.keep_logs or problems:
                self.say(f"node: logs kept in {self.logs}")
            else:
                shutil.rmtree(self.logs, ignore_errors=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        self._started = False
        self.say(
            f"node: stopped and undone in {time.monotonic() - t0:.0f}s ({', '.join(slow) or '-'})"
        )
        if problems:
            raise NodeError("node teardown left things behind:\n" + "\n".join(problems))

    def _delete_pods(self) -> None:
        for d in (self.scheduler, self.controller_manager):
            d.stop()  # nothing recreates the Pods meanwhile
        self.kubectl(
            "delete", "pods", "--all", "--all-namespaces", "--grace-period=2", "--wait=false"
        )

        def gone() -> bool:
            self.kubelet.check()
            return not self.kubectl("get", "pods", "-A", "-o", "name", check=False).strip()

        eventually_sync(gone, 120, 0.5, what="every Pod deleted by the kubelet", retry_on=())

        def no_tasks() -> bool:
            return not run(self._ctr("tasks", "ls", "-q"), check=False).split()

        with contextlib.suppress(NotMet):  # what is left, _remove_tasks removes
            eventually_sync(no_tasks, 30, 0.5, what="containerd's tasks gone", retry_on=())

    def _remove_tasks(self) -> None:
        if not self.containerd.running:
            return
        tasks = run(self._ctr("tasks", "ls", "-q"), check=False).split()
        for t in tasks:
            run(self._ctr("tasks", "kill", "-s", "SIGKILL", t), check=False)
        for t in tasks:
            run(self._ctr("tasks", "delete", "-f", t), check=False)


class _Background:
    """A function run in a thread; :meth:`join` waits for it and raises what it raised."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.error: BaseException | None = None

        def target() -> None:
            try:
                fn()
            except BaseException as e:
                self.error = e

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


@contextlib.contextmanager
def node(image: ImageLike | None = None, **kwargs: Any) -> Iterator[Node]:
    n = Node(image, **kwargs).start()
    try:
        yield n
    finally:
        n.stop()
