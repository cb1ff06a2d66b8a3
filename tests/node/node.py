"""A real node for the node tier: its own control plane on the host's address, containerd, CNI,
a kubelet and kube-proxy, the application image imported, all undone by :meth:`Node.stop`.

What runs (``Node.start``), everything under one work directory and one log directory:

* **etcd and kube-apiserver** (tests/e2e/controlplane.py's ``Etcd`` / ``ApiServer``) on the host's
  address and a free port, so that Pods reach it through the ``kubernetes`` Service (its
  endpoint is the host's address): ``--authorization-mode=Node,RBAC``, ``NodeRestriction``, the
  ServiceAccount admission plugin on (the ``kube-api-access`` projected volume is injected), the
  service-account issuer and keys, and a client cert for talking to the kubelet.
* **kube-controller-manager** (the default controllers: service-account tokens, the root CA
  publisher that writes ``kube-root-ca.crt`` into every namespace, deployments, replicasets,
  statefulsets, the garbage collector...) and **kube-scheduler**, with the admin kubeconfig.
* **containerd** (Debian's) with its own config, root, state, socket and runc root, and
  ``restrict_oom_score_adj = true`` (root on these machines lacks CAP_SYS_RESOURCE: the pause
  container's oom_score_adj of -998 is refused and every sandbox fails without it). The pause
  image is ``build/pause/linux/pause.c`` of the k8s.io/kubernetes module in the Go module cache,
  compiled with ``gcc -static`` and written as an image archive here (no registry is reachable);
  the application image's archive (``tools.image.build_image()``) is imported with ``ctr -n k8s.io
  images import`` while the control plane starts.
* **CNI**: a bridge (``kebnode0``) with host-local addresses on a private range, routes only to
  the Pod range, the Service range and the host's address; no default route, no masquerade:
  every address stays on this machine.
* **kubelet** (node identity by a client cert ``system:node:<name>`` in ``system:nodes``, no
  bootstrap; ``failCgroupV1: false``, ``cgroupDriver: cgroupfs``, webhook authentication and
  authorization, every port free-chosen) and **kube-proxy** (iptables mode: Pods reach
  ``10.0.0.1:443`` and ClusterIP Services), both from ``e2e/build-control-plane.sh --living
  --node newest``.

One node per machine: a machine-wide ``flock`` (:data:`LOCK`) makes a second one wait (the
kubelet's iptables chains, ``/var/lib/kubelet`` and the kubepods cgroups are the machine's).

What it changes on the host, and :meth:`Node.stop` undoes, stopping only what it started, by
pid: Pods deleted first (the kubelet tears down their sandboxes, networks and mounts), then the
kubelet, kube-proxy and ``kube-proxy --cleanup``, leftover containerd tasks, containerd and the
shims of its socket, the control plane; then the iptables chains that appeared (``KUBE-*``,
``CNI-*``) and the rules jumping to them, the bridge, the ``kubepods`` cgroups, the mounts under
its directories and the ``cni-*`` network namespaces it made, the sysctls the kubelet,
kube-proxy and the bridge plugin set (``ip_forward``, the kernel tunables), and
``/var/lib/kubelet``, ``/var/lib/cni``, ``/var/log/pods``, ``/var/log/containers`` when they did
not exist before.

Must run as root with ``containerd``, ``runc``, ``ctr``, the CNI plugins, ``conntrack``,
``iptables`` and a static libc for gcc; missing ones are installed with ``apt-get`` (Debian's
packages), else it fails saying what is missing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from hashlib import sha256
from io import BytesIO
from pathlib import Path
from typing import Any, Protocol

from k8s_event_sim.natsserver import NatsServer, binary
from tests import gotools
from tests.e2e.controlplane import (
    ApiServer,
    Certs,
    Etcd,
    KubectlError,
    ensure_binaries,
    kubernetes_version,
)
from tests.support import NotMet, eventually_sync, free_port, write_kubeconfig

LOCK = Path("/run/lock/k8s-event-bridge-node.lock")
NODE_NAME = "bridge-node"
BRIDGE = "kebnode0"
POD_CIDR = "10.244.77.0/24"
SERVICE_CIDR = "10.0.0.0/24"
PAUSE_TAG = "localhost/pause:3.10.2-local"
CNI_BIN = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
KEEP_ENV = "K8S_EVENT_BRIDGE_NODE_KEEP"
# host paths the kubelet and libcni write whatever their flags say; removed when we made them
HOST_DIRS = (
    Path("/var/lib/kubelet"),
    Path("/var/lib/cni"),
    Path("/var/log/pods"),
    Path("/var/log/containers"),
    Path("/run/netns"),
)
# what the kubelet (kernel tunables), kube-proxy and the bridge plugin may set; put back
SYSCTLS = (
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
    "net.ipv6.conf.all.forwarding",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
)
# Debian package of each command or file the node needs
PACKAGES = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    "conntrack": "conntrack",
    "iptables": "iptables",
    "ip": "iproute2",
    "gcc": "gcc",
}


class NodeError(RuntimeError):
    """The node could not be set up, started, driven or undone."""


class ImageLike(Protocol):
    """What the node needs of ``tools.image.Image``."""

    @property
    def tag(self) -> str: ...

    @property
    def archive(self) -> Path: ...


# ----------------------------------------------------------------------------- host facts


def host_address() -> str:
    """The host's IPv4 address: ``$K8S_EVENT_BRIDGE_NODE_HOST``, else the address of the
    interface of the default route, else the first global IPv4 address."""
    if os.environ.get("K8S_EVENT_BRIDGE_NODE_HOST"):
        return os.environ["K8S_EVENT_BRIDGE_NODE_HOST"]
    routes = json.loads(_out(["ip", "-j", "-4", "route", "show", "default"]) or "[]")
    devs = [r["dev"] for r in routes if r.get("dev")]
    addrs = json.loads(
        _out(["ip", "-j", "-4", "addr", "show", *(["dev", devs[0]] if devs else [])])
    )
    for link in addrs:
        for info in link.get("addr_info", []):
            if info.get("family") == "inet" and info.get("scope") == "global":
                return str(info["local"])
    raise NodeError("no global IPv4 address on this host (set K8S_EVENT_BRIDGE_NODE_HOST)")


def _out(argv: Sequence[str], check: bool = True, **kw: Any) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False, **kw)
    if check and done.returncode != 0:
        raise NodeError(f"{shlex.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _go() -> str:
    found = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if not found:
        raise NodeError("go is not installed (the pause image is built from the kubernetes module)")
    return found


def missing_prerequisites() -> list[str]:
    """The Debian packages the node needs and the host lacks."""
    missing = {pkg for cmd, pkg in PACKAGES.items() if shutil.which(cmd) is None}
    if not all(os.access(CNI_BIN / p, os.X_OK) for p in CNI_PLUGINS):
        missing.add("containernetworking-plugins")
    if shutil.which("gcc"):
        libc = _out(["gcc", "-print-file-name=libc.a"], check=False).strip()
        if not Path(libc).is_absolute() or not Path(libc).exists():
            missing.add("libc6-dev")
    else:
        missing.add("libc6-dev")
    return sorted(missing)


def ensure_prerequisites(say: Callable[[str], None]) -> None:
    """Install what is missing with apt-get (as root), else fail saying what is missing."""
    if os.geteuid() != 0:
        raise NodeError("the node tier runs a kubelet and containerd: it must run as root")
    missing = missing_prerequisites()
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise NodeError(f"missing: {', '.join(missing)} (install them; no apt-get here)")
    say(f"node: apt-get install {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    if subprocess.run(cmd, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise NodeError(f"apt-get install {' '.join(missing)} failed:\n{done.stderr[-2000:]}")
    still = missing_prerequisites()
    if still:
        raise NodeError(f"still missing after apt-get: {', '.join(still)}")


# ----------------------------------------------------------------------------- images


def image_archive(path: Path, tag: str, files: dict[str, bytes], config: dict[str, Any]) -> Path:
    """A one-layer image archive in ``docker save``'s format (``ctr images import`` reads it):
    ``files`` (name -> content, mode 0755) as the layer, ``config`` as the image config."""
    layer = BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, BytesIO(data))
    layer_bytes = layer.getvalue()
    diff_id = sha256(layer_bytes).hexdigest()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    cfg = {
        "architecture": arch,
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
    }
    cfg_bytes = json.dumps(cfg).encode()
    cfg_name = f"{sha256(cfg_bytes).hexdigest()}.json"
    manifest = [{"Config": cfg_name, "RepoTags": [tag], "Layers": [f"{diff_id}/layer.tar"]}]
    members = {
        f"{diff_id}/layer.tar": layer_bytes,
        cfg_name: cfg_bytes,
        "manifest.json": json.dumps(manifest).encode(),
    }
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, BytesIO(data))
    return path


def pause_image(workdir: Path, version: str) -> Path:
    """The pause image's archive: pause.c of k8s.io/kubernetes@``version`` (the module the
    kubelet was built from) compiled static, ``FROM scratch``, as user 65535."""
    mod = json.loads(_out([_go(), "mod", "download", "-json", f"k8s.io/kubernetes@{version}"]))
    source = Path(mod["Dir"]) / "build" / "pause" / "linux" / "pause.c"
    binary = workdir / "pause"
    _out(
        [
            "gcc",
            "-Os",
            "-Wall",
            "-Werror",
            "-static",
            f"-DVERSION={version}-local",
            "-o",
            str(binary),
            str(source),
        ]
    )
    _out(["strip", str(binary)], check=False)
    return image_archive(
        workdir / "pause.tar",
        PAUSE_TAG,
        {"pause": binary.read_bytes()},
        {"Entrypoint": ["/pause"], "User": "65535:65535"},
    )


# ----------------------------------------------------------------------------- processes


class Daemon:
    """One long-running process the node started: its own process group, its own log."""

    def __init__(
        self, name: str, argv: Sequence[str], log_dir: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_dir / f"{name}.log"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> Daemon:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(self.env or {})},
            )
        return self

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise NodeError(
                f"{self.name} exited with {self.proc.returncode}:\n{tail(self.log_path)}"
            )

    def stop(self, grace: float = 20) -> None:
        """SIGTERM to its process group, SIGKILL after ``grace`` seconds."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def _pids_with(needle: str) -> list[int]:
    """Processes whose command line contains ``needle`` (our own socket path: only ours)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace"
            ):
                out.append(int(entry.name))
    return out


def _mounts() -> list[str]:
    points = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            points.append(line.split()[4].replace("\\040", " "))
    return points


def _sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def _chains(ipt: str) -> dict[str, set[str]]:
    """Every chain of each table, as ``<ipt>-save`` lists them."""
    out: dict[str, set[str]] = {}
    for table in ("filter", "nat", "mangle", "raw"):
        text = _out([f"{ipt}-save", "-t", table], check=False)
        out[table] = {line[1:].split()[0] for line in text.splitlines() if line.startswith(":")}
    return out


# ----------------------------------------------------------------------------- the node


class Node:
    """A real node (see the module docstring). ``Node(image).start()`` ... ``stop()``, or as a
    context manager. ``say`` gets one line per step (where the logs are, timings)."""

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
        self.image = image.tag if image else PAUSE_TAG
        self.apiserver_args = list(apiserver_args)
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.host = ""
        self.dir = Path()
        self.logs = Path()
        self.daemons: list[Daemon] = []
        self.timings: dict[str, float] = {}
        self.keep_logs = os.environ.get(KEEP_ENV) == "1"
        self._lock: int | None = None
        self._before: dict[str, Any] = {}
        self._import_error: BaseException | None = None
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Node:
        t0 = time.monotonic()
        ensure_prerequisites(self.say)
        self.bin = self._bin_path or ensure_binaries(self.version, living=True, node=True)
        self._take_lock()
        self._started = True
        try:
            self._start()
        except BaseException:
            self.say(f"node: start failed; kubelet log:\n{tail(self.logs / 'kubelet.log', 20)}")
            self.keep_logs = True
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
        self.host = host_address()
        self.dir = Path(tempfile.mkdtemp(prefix="k8s-event-bridge-node-"))
        self.logs = Path(tempfile.mkdtemp(prefix="k8s-event-bridge-node-logs-"))
        self._snapshot_host()
        self.say(
            f"node: work dir {self.dir}; logs in {self.logs} (kubelet.log, containerd.log, "
            "kube-apiserver.log, etcd.log, kube-controller-manager.log, kube-scheduler.log, "
            f"kube-proxy.log); admin kubeconfig {self.dir / 'kube-apiserver.kubeconfig'}"
        )
        self._write_pki()
        self._step("pause image", lambda: pause_image(self.dir, self.version))
        self._start_containerd()
        self._step("pause image imported", lambda: self.import_image(self.dir / "pause.tar"))
        importer = None
        if self.image_source is not None:
            archive = self.image_source.archive
            importer = _Background(lambda: self.import_image(archive))
        self._step("control plane", self._start_control_plane)
        self._step("kubelet and node Ready", self._start_kubelet)
        self._step("kube-proxy", self._start_kube_proxy)
        if importer is not None:
            self._step(f"image {self.image} imported", importer.join)
        self.wait_for(
            lambda: self.kubectl("get", "sa", "default", "-n", "default", check=False) != "",
            "the default ServiceAccount",
        )

    def _step(self, what: str, fn: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        result = fn()
        self.timings[what] = time.monotonic() - t0
        self.say(f"node: {what} ({self.timings[what]:.1f}s)")
        return result

    # ------------------------------------------------------------------ parts

    def _write_pki(self) -> None:
        pki = self.dir / "pki"
        self.certs = Certs(pki, hosts=[self.host])
        self.node_cert = self.certs.issue(
            "node", f"system:node:{NODE_NAME}", organization="system:nodes"
        )
        self.kubelet_serving = self.certs.issue(
            "kubelet-serving", NODE_NAME, server_ips=[self.host], server_names=[NODE_NAME]
        )

    def _start_containerd(self) -> None:
        d = self.dir / "containerd"
        d.mkdir()
        cni = self.dir / "cni"
        (cni / "net.d").mkdir(parents=True)
        (cni / "ipam").mkdir()
        self.socket = d / "containerd.sock"
        (cni / "net.d" / "10-node.conflist").write_text(json.dumps(self._cni_config(cni), indent=2))
        config = d / "config.toml"
        config.write_text(
            f'''version = 2
root = "{d / "root"}"
state = "{d / "state"}"
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{d / "opt"}"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{PAUSE_TAG}"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    # root here lacks CAP_SYS_RESOURCE: runc cannot set oom_score_adj < 0 (pause wants -998)
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "{d / "runc"}"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "{CNI_BIN}"
      conf_dir = "{cni / "net.d"}"
      max_conf_num = 1
'''
        )
        self.containerd = self._daemon("containerd", ["containerd", "--config", config])

        def up() -> bool:
            self.containerd.check()
            return (
                subprocess.run(self._ctr("version"), capture_output=True, check=False).returncode
                == 0
            )

        self._eventually(up, "containerd answering on its socket", 30)

    def _cni_config(self, cni: Path) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "k8s-event-bridge-node",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(cni / "ipam"),
                        "ranges": [[{"subnet": POD_CIDR}]],
                        # no default route: the Pods reach their range, the Services and the host
                        "routes": [
                            {"dst": POD_CIDR},
                            {"dst": SERVICE_CIDR},
                            {"dst": f"{self.host}/32"},
                        ],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
                {"type": "loopback"},
            ],
        }

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
        self.apiserver.start()
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
                f"--service-cluster-ip-range={SERVICE_CIDR}",
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

    def _start_kubelet(self) -> None:
        root = self.dir / "kubelet"
        root.mkdir()
        self.kubelet_root = root
        self.kubelet_port = free_port()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,  # these machines are cgroup v1
            "cgroupDriver": "cgroupfs",
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.host,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "tlsCertFile": str(self.kubelet_serving[0]),
            "tlsPrivateKeyFile": str(self.kubelet_serving[1]),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.certs.ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            "clusterDomain": "cluster.local",
            "failSwapOn": False,
            "rotateCertificates": False,
            "serverTLSBootstrap": False,
            "registerNode": True,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            "podLogsDir": str(self.dir / "pod-logs"),
        }
        path = self.dir / "kubelet-config.json"
        path.write_text(json.dumps(config, indent=2))
        self.kubelet = self._daemon(
            "kubelet",
            [
                self.bin / "kubelet",
                f"--config={path}",
                f"--kubeconfig={self.node_kubeconfig}",
                f"--root-dir={root}",
                f"--cert-dir={self.dir / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={self.host}",
                "--v=2",
            ],
        )
        self.wait_for(self.node_ready, f"node {NODE_NAME} Ready", 120)

    def _start_kube_proxy(self) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(self.kubeconfig)},
            "hostnameOverride": NODE_NAME,
            "clusterCIDR": POD_CIDR,
            "bindAddress": self.host,
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "nodePortAddresses": [f"{self.host}/32"],
            # leave the host's conntrack table size and timeouts as they are
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        }
        path = self.dir / "kube-proxy-config.json"
        path.write_text(json.dumps(config, indent=2))
        self.kube_proxy = self._daemon(
            "kube-proxy", [self.bin / "kube-proxy", f"--config={path}", "--v=2"]
        )

        def synced() -> bool:
            rules = _out(["iptables", "-t", "nat", "-S", "KUBE-SERVICES"], check=False)
            return "10.0.0.1/32" in rules

        self.wait_for(synced, "kube-proxy's rules for the kubernetes Service", 60)

    def _daemon(self, name: str, argv: Sequence[Any]) -> Daemon:
        d = Daemon(name, [str(a) for a in argv], self.logs).start()
        self.daemons.append(d)
        return d

    def _healthy(self, daemon: Daemon, url: str) -> None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
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
        """Poll ``check()`` until truthy; a dead daemon of the node fails at once."""

        def met() -> Any:
            for d in self.daemons:
                d.check()
            return check()

        self._eventually(met, what, timeout)

    def node_ready(self) -> bool:
        text = self.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
        if not text:
            return False
        for cond in json.loads(text).get("status", {}).get("conditions") or []:
            if cond.get("type") == "Ready":
                return bool(cond.get("status") == "True")
        return False

    # ------------------------------------------------------------------ driving

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> str:
        """kubectl as the admin; stdout. Raises KubectlError on failure unless ``check=False``
        (then a failure returns '')."""
        done = self.apiserver.kubectl(*args, input=input, check=check, timeout=timeout)
        return done.stdout if done.returncode == 0 else ""

    def get(self, *args: str) -> dict[str, Any]:
        """``kubectl get <args> -o json``, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json"))  # type: ignore[no-any-return]

    def apply(self, doc: dict[str, Any] | str, *args: str) -> str:
        """``kubectl apply -f -`` of a manifest (a dict or YAML/JSON text)."""
        text = doc if isinstance(doc, str) else json.dumps(doc)
        return self.kubectl("apply", *args, "-f", "-", input=text)

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> str:
        """helm (e2e/build-go-tool.sh helm) against this node's API server, as the admin; its
        caches and config in the node's work dir. stdout; raises NodeError on failure."""
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
        """Load an image archive (``docker save`` format) into containerd for the kubelet."""
        _out(["nice", "-n", "10", *self._ctr("images", "import", str(archive))])

    def ctr(self, *args: str) -> str:
        """``ctr`` on this node's containerd, namespace k8s.io (the kubelet's)."""
        return _out(self._ctr(*args))

    def _ctr(self, *args: str) -> list[str]:
        return ["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args]

    def create_namespace(self, name: str) -> str:
        """A namespace whose ``default`` ServiceAccount and ``kube-root-ca.crt`` are there (the
        controller-manager writes both; a Pod is refused or stuck until then)."""
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
        """Delete the namespace and wait until it is gone (its Pods stopped by the kubelet)."""
        self.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")
        self.wait_for(
            lambda: not self.kubectl("get", "namespace", name, "-o", "name", check=False),
            f"namespace {name} gone",
            timeout,
        )

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.get("pod", name, "-n", namespace)

    def wait_pod(
        self, namespace: str, name: str, state: str = "Ready", timeout: float = 180
    ) -> dict[str, Any]:
        """Until the Pod is ``Ready`` (its condition) or in phase ``state`` (``Running``,
        ``Succeeded``, ``Failed``); a Pod that fails while waiting for another state fails at
        once, with its status and events. Returns the Pod."""
        found: dict[str, Any] = {}

        def there() -> bool:
            text = self.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
            if not text:
                return False
            found.update(json.loads(text))
            status = found.get("status", {})
            phase = status.get("phase")
            if phase == "Failed" and state != "Failed":
                raise NodeError(f"pod {namespace}/{name} Failed:\n{self.describe(namespace, name)}")
            if state == "Ready":
                conds = status.get("conditions") or []
                return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
            return bool(phase == state)

        try:
            self.wait_for(there, f"pod {namespace}/{name} {state}", timeout)
        except NodeError as e:
            raise NodeError(f"{e}\n{self.describe(namespace, name)}") from None
        return found

    def describe(self, namespace: str, name: str) -> str:
        """The Pod's status and the Events about it, for a failure's message."""
        status = self.kubectl(
            "get", "pod", name, "-n", namespace, "-o", "jsonpath={.status}", check=False
        )
        events = self.events(namespace, name)
        lines = [f"  {e.get('type')} {e.get('reason')}: {e.get('message')}" for e in events]
        return f"status: {status}\nevents:\n" + "\n".join(lines)

    def pod_logs(
        self, namespace: str, name: str, container: str | None = None, previous: bool = False
    ) -> str:
        """The container's log, as ``kubectl logs`` gives it (through the kubelet)."""
        args = ["logs", name, "-n", namespace]
        if container:
            args += ["-c", container]
        if previous:
            args.append("--previous")
        return self.kubectl(*args)

    def events(self, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
        """The core/v1 Events in ``namespace`` (about the object ``name`` when given)."""
        args = ["get", "events", "-n", namespace, "-o", "json"]
        if name:
            args.append(f"--field-selector=involvedObject.name={name}")
        text = self.kubectl(*args, check=False)
        items = json.loads(text)["items"] if text else []
        return sorted(items, key=lambda e: e["metadata"].get("resourceVersion", "0"))

    def container_id(self, namespace: str, pod: str, container: str) -> str:
        statuses = self.pod(namespace, pod)["status"].get("containerStatuses") or []
        for s in statuses:
            if s["name"] == container and s.get("containerID"):
                return str(s["containerID"]).split("://", 1)[1]
        raise NodeError(f"no running container {container} in pod {namespace}/{pod}")

    def container_pid(self, namespace: str, pod: str, container: str) -> int:
        """The host pid of the container's main process (for real signals from the host)."""
        cid = self.container_id(namespace, pod, container)
        pidfile = (
            self.dir
            / "containerd"
            / "state"
            / "io.containerd.runtime.v2.task"
            / "k8s.io"
            / cid
            / "init.pid"
        )
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
        <volume>``), e.g. a projected service-account token."""
        uid = self.pod(namespace, pod)["metadata"]["uid"]
        found = sorted((self.kubelet_root / "pods" / uid / "volumes").glob(f"*/{volume}"))
        if not found:
            raise NodeError(
                f"no volume {volume} of pod {namespace}/{pod} under {self.kubelet_root}"
            )
        return found[0]

    def log_tails(self, lines: int = 40, names: Sequence[str] = ("kubelet", "containerd")) -> str:
        """The end of the named daemons' logs (for a failed test's report)."""
        return "\n".join(
            f"----- {name} ({self.logs / (name + '.log')}), last {lines} lines\n"
            f"{tail(self.logs / (name + '.log'), lines)}"
            for name in names
        )

    # ------------------------------------------------------------------ teardown

    def _snapshot_host(self) -> None:
        self._before = {
            "dirs": {p: p.exists() for p in HOST_DIRS},
            "sysctls": {
                k: _sysctl_path(k).read_text().strip() for k in SYSCTLS if _sysctl_path(k).exists()
            },
            "chains": {
                ipt: _chains(ipt)
                for ipt in ("iptables", "ip6tables")
                if shutil.which(f"{ipt}-save")
            },
            "cgroups": {c for c in Path("/sys/fs/cgroup").glob("*/kubepods")},
            "netns": set(Path("/run/netns").glob("cni-*"))
            if Path("/run/netns").exists()
            else set(),
            "bridge": Path(f"/sys/class/net/{BRIDGE}").exists(),
        }

    def stop(self) -> None:
        """Undo everything :meth:`start` did, in order; what could not be undone is said."""
        if not self._started:
            return
        problems: list[str] = []

        def attempt(what: str, fn: Callable[[], Any]) -> None:
            try:
                fn()
            except Exception as e:  # keep undoing the rest
                problems.append(f"{what}: {e}")

        t0 = time.monotonic()
        if getattr(self, "kubelet", None) is not None and self.kubelet.running:
            attempt("deleting the Pods", self._delete_pods)
        for name in ("kubelet", "kube_proxy"):
            d = getattr(self, name, None)
            if d is not None:
                attempt(f"stopping {d.name}", d.stop)
        if getattr(self, "kube_proxy", None) is not None:
            attempt(
                "kube-proxy --cleanup",
                lambda: _out([str(self.bin / "kube-proxy"), "--cleanup"], check=False),
            )
        if getattr(self, "containerd", None) is not None:
            attempt("removing leftover containers", self._remove_tasks)
            attempt("stopping containerd", self.containerd.stop)
            attempt("stopping its shims", self._stop_shims)
        for name in ("scheduler", "controller_manager"):
            d = getattr(self, name, None)
            if d is not None:
                attempt(f"stopping {d.name}", d.stop)
        if getattr(self, "apiserver", None) is not None:
            attempt("stopping kube-apiserver", self.apiserver.stop)
            attempt("stopping etcd", self.etcd.stop)
        if self._before:
            attempt("iptables", self._undo_iptables)
            attempt("bridge", self._undo_bridge)
            attempt("mounts", self._undo_mounts)
            attempt("cgroups", self._undo_cgroups)
            attempt("sysctls", self._undo_sysctls)
            attempt("host dirs", self._undo_dirs)
        if self.dir != Path() and self.dir.exists():
            left = [m for m in _mounts() if m.startswith(f"{self.dir}/")]
            if left:
                problems.append(f"mounts remain, {self.dir} kept: {left[:5]}")
            else:
                shutil.rmtree(self.dir, ignore_errors=True)
        if self.logs != Path():
            if self.keep_logs or problems:
                self.say(f"node: logs kept in {self.logs}")
            else:
                shutil.rmtree(self.logs, ignore_errors=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        self._started = False
        self.say(f"node: stopped and undone in {time.monotonic() - t0:.0f}s")
        if problems:
            raise NodeError("node teardown left things behind:\n" + "\n".join(problems))

    def _delete_pods(self) -> None:
        # no controller recreates them meanwhile
        for d in (self.scheduler, self.controller_manager):
            d.stop()
        self.kubectl(
            "delete",
            "pods",
            "--all",
            "--all-namespaces",
            "--grace-period=2",
            "--wait=false",
            check=False,
        )

        def gone() -> bool:
            self.kubelet.check()
            return not self.kubectl("get", "pods", "-A", "-o", "name", check=False).strip()

        eventually_sync(gone, 120, 0.5, what="every Pod deleted by the kubelet", retry_on=())

        def no_tasks() -> bool:
            return len(_out(self._ctr("tasks", "ls", "-q"), check=False).split()) == 0

        with contextlib.suppress(NotMet):
            eventually_sync(no_tasks, 30, 0.5, what="containerd's tasks gone", retry_on=())

    def _remove_tasks(self) -> None:
        if not self.containerd.running:
            return
        tasks = _out(self._ctr("tasks", "ls", "-q"), check=False).split()
        for t in tasks:
            _out(self._ctr("tasks", "kill", "-s", "SIGKILL", t), check=False)
        for t in tasks:
            _out(self._ctr("tasks", "delete", "-f", t), check=False)

    def _stop_shims(self) -> None:
        pids = _pids_with(f"-address {self.socket}")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _undo_iptables(self) -> None:
        for ipt, before in self._before["chains"].items():
            for table, chains in _chains(ipt).items():
                new = {
                    c for c in chains - before.get(table, set()) if c.startswith(("KUBE-", "CNI-"))
                }
                if not new:
                    continue
                rules = _out([f"{ipt}-save", "-t", table], check=False).splitlines()
                for rule in rules:
                    if not rule.startswith("-A "):
                        continue
                    parts = shlex.split(rule)
                    target = parts[parts.index("-j") + 1] if "-j" in parts else None
                    if parts[1] not in new and target in new:
                        _out([ipt, "-t", table, "-D", *parts[1:]], check=False)
                for chain in new:
                    _out([ipt, "-t", table, "-F", chain], check=False)
                for chain in new:
                    _out([ipt, "-t", table, "-X", chain], check=False)

    def _undo_bridge(self) -> None:
        if not self._before["bridge"] and Path(f"/sys/class/net/{BRIDGE}").exists():
            _out(["ip", "link", "del", BRIDGE])

    def _undo_mounts(self) -> None:
        roots = [f"{self.dir}/", "/var/lib/kubelet/"]
        points = [
            m for m in _mounts() if m.startswith(tuple(roots)) or m == str(self.dir / "kubelet")
        ]
        points += (
            [str(p) for p in Path("/run/netns").glob("cni-*") if p not in self._before["netns"]]
            if Path("/run/netns").exists()
            else []
        )
        for point in sorted(set(points), key=len, reverse=True):
            if subprocess.run(["umount", point], capture_output=True, check=False).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        for ns in Path("/run/netns").glob("cni-*") if Path("/run/netns").exists() else []:
            if ns not in self._before["netns"]:
                with contextlib.suppress(OSError):
                    ns.unlink()

    def _undo_cgroups(self) -> None:
        for top in Path("/sys/fs/cgroup").glob("*/kubepods"):
            if top in self._before["cgroups"]:
                continue
            for d in sorted(
                (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
            ):
                with contextlib.suppress(OSError):
                    d.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()

    def _undo_sysctls(self) -> None:
        for key, value in self._before["sysctls"].items():
            path = _sysctl_path(key)
            with contextlib.suppress(OSError):
                if path.read_text().strip() != value:
                    path.write_text(value)

    def _undo_dirs(self) -> None:
        for path, existed in self._before["dirs"].items():
            if not existed and path.exists():
                shutil.rmtree(path, ignore_errors=True)


class HostNats(NatsServer):
    """nats-server -js on the host's address (the Pods reach it there), its own store."""

    def __init__(self, host: str, store_dir: str) -> None:
        super().__init__(store_dir=store_dir)
        self.host = host

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> HostNats:
        cmd = [binary(), "-js", "-a", self.host, "-p", str(self.port), "-sd", self.store_dir]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        proc = self.proc

        def listening() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"nats-server exited: {Path(self.log_path).read_text()[-2000:]}")
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True

        eventually_sync(listening, timeout, 0.05, what=f"nats-server on {self.host}:{self.port}")
        return self


class _Background:
    """A function run in a thread; :meth:`join` waits and raises what it raised."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        import threading

        self.error: BaseException | None = None

        def run() -> None:
            try:
                fn()
            except BaseException as e:
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
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


__all__ = [
    "LOCK",
    "NODE_NAME",
    "HostNats",
    "KubectlError",
    "Node",
    "NodeError",
    "host_address",
    "node",
]
