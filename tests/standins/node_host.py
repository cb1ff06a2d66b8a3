"""The machine under a real node (tests/standins/node.py): its address, the packages the node
needs, the processes it starts, and every change it makes to the host, recorded before and
undone after.

A node changes the host beyond its own directories: the kubelet adds iptables chains
(``KUBE-FIREWALL``, ``KUBE-KUBELET-CANARY``, ``KUBE-IPTABLES-HINT``) and sets kernel tunables
(``vm.overcommit_memory``, ``kernel.panic``...), kube-proxy its ``KUBE-*`` chains, the CNI bridge
plugin a bridge and ``net.ipv4.ip_forward``, containerd's CNI a network namespace per Pod in
``/run/netns``, the kubelet the ``kubepods`` cgroups and ``/var/lib/kubelet`` (some paths of it
are fixed whatever ``--root-dir`` says), libcni ``/var/lib/cni``, the kubelet
``/var/log/pods`` and ``/var/log/containers``. :class:`Host` records what was there before
(:meth:`Host.snapshot`) and :meth:`Host.undo` removes only what appeared since: the chains of
those names that are new and the rules jumping to them, the bridge when it is new, the mounts
under the node's directories, the new ``cni-*`` namespaces, the new ``kubepods`` cgroups (after
killing what is still in them), the sysctls that changed (put back), the host directories that
did not exist.

The record is also written to :data:`STATE` with the pid and command line of every process the
node starts. A run killed before its teardown (SIGKILL, a power cut of the test runner) leaves
that file behind; the next node, holding the machine's lock, finds it and undoes the dead run's
changes first (:func:`recover`), stopping only the processes the file names, each only when its
command line is still the one recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support import NotMet, eventually_sync

STATE = Path("/run/k8s-event-bridge-node/state.json")
BRIDGE = "kebnode0"
CHAIN_PREFIXES = ("KUBE-", "CNI-")
CNI_BIN = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
# host paths the kubelet and libcni write whatever their flags say
HOST_DIRS = (
    "/var/lib/kubelet",
    "/var/lib/cni",
    "/var/log/pods",
    "/var/log/containers",
    "/run/netns",
)
# what the kubelet (kernel tunables), kube-proxy and the bridge plugin may set
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
# the Debian package of each command the node runs
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
    """The host lacks what a node needs, or a change could not be made or undone."""


def run(argv: Sequence[str], check: bool = True, **kw: Any) -> str:
    """Run a command; its stdout. Raises NodeError with its stderr on failure if ``check``."""
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False, **kw)
    if check and done.returncode != 0:
        raise NodeError(f"{shlex.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


# ----------------------------------------------------------------------------- facts


def address() -> str:
    """The host's IPv4 address: ``$K8S_EVENT_BRIDGE_NODE_HOST``, else the address of the
    interface of the default route, else the first global IPv4 address."""
    if os.environ.get("K8S_EVENT_BRIDGE_NODE_HOST"):
        return os.environ["K8S_EVENT_BRIDGE_NODE_HOST"]
    routes = json.loads(run(["ip", "-j", "-4", "route", "show", "default"]) or "[]")
    devs = [r["dev"] for r in routes if r.get("dev")]
    links = json.loads(run(["ip", "-j", "-4", "addr", "show", *(["dev", devs[0]] if devs else [])]))
    for link in links:
        for info in link.get("addr_info", []):
            if info.get("family") == "inet" and info.get("scope") == "global":
                return str(info["local"])
    raise NodeError("no global IPv4 address on this host (set K8S_EVENT_BRIDGE_NODE_HOST)")


def missing_packages() -> list[str]:
    """The Debian packages the node needs and the host lacks."""
    missing = {pkg for cmd, pkg in PACKAGES.items() if shutil.which(cmd) is None}
    if not all(os.access(CNI_BIN / p, os.X_OK) for p in CNI_PLUGINS):
        missing.add("containernetworking-plugins")
    libc = run(["gcc", "-print-file-name=libc.a"], check=False) if shutil.which("gcc") else ""
    if not Path(libc.strip()).is_absolute() or not Path(libc.strip()).exists():
        missing.add("libc6-dev")  # gcc -static (the pause binary)
    return sorted(missing)


def ensure_packages(say: Any) -> None:
    """Install what is missing with apt-get (as root), else fail saying what is missing."""
    if os.geteuid() != 0:
        raise NodeError("a node runs a kubelet and containerd: the node tier must run as root")
    missing = missing_packages()
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise NodeError(f"missing: {', '.join(missing)} (install them; there is no apt-get here)")
    say(f"node: apt-get install {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    if subprocess.run(cmd, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise NodeError(f"apt-get install {' '.join(missing)} failed:\n{done.stderr[-2000:]}")
    still = missing_packages()
    if still:
        raise NodeError(f"still missing after apt-get install: {', '.join(still)}")


# ----------------------------------------------------------------------------- processes


class Daemon:
    """One long-running process of the node: its own session (process group), its own log."""

    def __init__(self, name: str, argv: Sequence[Any], log_dir: Path) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

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
            )
        return self

    def check(self) -> None:
        """Raise NodeError with the end of its log if it has exited."""
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


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def pids_with(needle: str) -> list[int]:
    """The processes whose command line contains ``needle`` (a path of the node's own)."""
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and needle in cmdline(int(p.name))
    ]


def mounts() -> list[str]:
    """Every mount point, as /proc/self/mountinfo lists them."""
    with contextlib.suppress(OSError):
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
        return [line.split()[4].replace("\\040", " ") for line in lines]
    return []


def _sysctl(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def _chains(ipt: str) -> dict[str, list[str]]:
    """Every chain of each table, as ``<ipt>-save`` lists them."""
    out: dict[str, list[str]] = {}
    for table in ("filter", "nat", "mangle", "raw"):
        text = run([f"{ipt}-save", "-t", table], check=False)
        out[table] = sorted({ln[1:].split()[0] for ln in text.splitlines() if ln.startswith(":")})
    return out


def _netns() -> list[str]:
    d = Path("/run/netns")
    return sorted(str(p) for p in d.glob("cni-*")) if d.exists() else []


def _cgroups() -> list[str]:
    return sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/kubepods"))


# ----------------------------------------------------------------------------- the record


class Host:
    """The host's state before a node started, the node's directories and processes; written
    to :data:`STATE` at each change so that a later run can undo a dead one."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    @classmethod
    def snapshot(cls, workdir: Path, socket: Path, logs: Path) -> Host:
        host = cls(
            {
                "workdir": str(workdir),
                "logs": str(logs),
                "socket": str(socket),
                "pids": [],
                "dirs": {p: Path(p).exists() for p in HOST_DIRS},
                "sysctls": {
                    k: _sysctl(k).read_text().strip() for k in SYSCTLS if _sysctl(k).exists()
                },
                "chains": {
                    i: _chains(i) for i in ("iptables", "ip6tables") if shutil.which(f"{i}-save")
                },
                "cgroups": _cgroups(),
                "netns": _netns(),
                "bridge": Path(f"/sys/class/net/{BRIDGE}").exists(),
            }
        )
        host.save()
        return host

    def save(self) -> None:
        STATE.parent.mkdir(parents=True, exist_ok=True)
        tmp = STATE.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.record, indent=1))
        tmp.replace(STATE)

    def started(self, daemon: Daemon) -> None:
        """Record a process the node started (its pid and command line)."""
        assert daemon.proc is not None
        argv = daemon.proc.args if isinstance(daemon.proc.args, list) else [daemon.proc.args]
        line = " ".join(str(a) for a in argv)
        self.record["pids"].append({"pid": daemon.proc.pid, "cmdline": line})
        self.save()

    def kill_recorded(self) -> None:
        """SIGKILL the process group of each recorded process still running the recorded
        command line, and the containerd shims of the node's socket."""
        for entry in self.record["pids"]:
            if entry["cmdline"] and cmdline(entry["pid"]).strip() == entry["cmdline"]:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(entry["pid"], signal.SIGKILL)
        self.kill_shims()

    def kill_shims(self) -> None:
        for pid in pids_with(f"-address {self.record['socket']}"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def undo(self) -> list[str]:
        """Undo every change of the host since the snapshot; what could not be undone."""
        problems = []
        for what, fn in (
            ("cgroups", self._undo_cgroups),
            ("mounts and network namespaces", self._undo_mounts),
            ("iptables", self._undo_iptables),
            ("bridge", self._undo_bridge),
            ("sysctls", self._undo_sysctls),
            ("host directories", self._undo_dirs),
        ):
            try:
                fn()
            except Exception as e:  # keep undoing the rest
                problems.append(f"{what}: {e}")
        workdir = self.record["workdir"]
        left = [m for m in mounts() if m.startswith(f"{workdir}/")]
        if left:
            problems.append(f"mounts remain under {workdir}, kept: {left[:5]}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
            STATE.unlink(missing_ok=True)
        return problems

    def _undo_cgroups(self) -> None:
        """The kubepods cgroups that are new: what still runs in them is killed (a container
        whose shim died with a crashed run), then each directory removed, the deepest first."""
        tops = [Path(c) for c in _cgroups() if c not in self.record["cgroups"]]
        dirs = [d for top in tops for d in (top, *(p for p in top.rglob("*") if p.is_dir()))]

        def procs() -> list[int]:
            found = []
            for d in dirs:
                with contextlib.suppress(OSError):
                    found += [int(p) for p in (d / "cgroup.procs").read_text().split()]
            return found

        for pid in procs():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(NotMet):  # a cgroup with a process left is not removed: said
            eventually_sync(lambda: not procs(), 10, 0.1, what="kubepods emptied", retry_on=())
        for d in sorted(dirs, key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        left = [str(d) for d in dirs if d.exists()]
        if left:
            raise NodeError(f"cgroups not removed: {left[:5]}")

    def _undo_mounts(self) -> None:
        workdir = self.record["workdir"]
        new_ns = [n for n in _netns() if n not in self.record["netns"]]
        inside = (f"{workdir}/", "/var/lib/kubelet/")
        points = [m for m in mounts() if m.startswith(inside) or m == "/var/lib/kubelet"]
        points += [m for m in mounts() if m in new_ns]
        for point in sorted(set(points), key=len, reverse=True):
            if subprocess.run(["umount", point], capture_output=True, check=False).returncode:
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        for ns in new_ns:
            with contextlib.suppress(OSError):
                Path(ns).unlink()

    def _undo_iptables(self) -> None:
        for ipt, before in self.record["chains"].items():
            for table, chains in _chains(ipt).items():
                new = {
                    c
                    for c in set(chains) - set(before.get(table, []))
                    if c.startswith(CHAIN_PREFIXES)
                }
                if not new:
                    continue
                for rule in run([f"{ipt}-save", "-t", table], check=False).splitlines():
                    if not rule.startswith("-A "):
                        continue
                    parts = shlex.split(rule)
                    target = parts[parts.index("-j") + 1] if "-j" in parts else None
                    if parts[1] not in new and target in new:
                        run([ipt, "-t", table, "-D", *parts[1:]], check=False)
                for chain in new:
                    run([ipt, "-t", table, "-F", chain], check=False)
                for chain in new:
                    run([ipt, "-t", table, "-X", chain], check=False)

    def _undo_bridge(self) -> None:
        if not self.record["bridge"] and Path(f"/sys/class/net/{BRIDGE}").exists():
            run(["ip", "link", "del", BRIDGE])

    def _undo_sysctls(self) -> None:
        for key, value in self.record["sysctls"].items():
            path = _sysctl(key)
            with contextlib.suppress(OSError):
                if path.read_text().strip() != value:
                    path.write_text(value)

    def _undo_dirs(self) -> None:
        for path, existed in self.record["dirs"].items():
            if not existed and Path(path).exists():
                shutil.rmtree(path, ignore_errors=True)


def recover(say: Any) -> None:
    """Undo what a node that died before its teardown left (its :data:`STATE`), if any. Call
    it holding the machine's lock."""
    if not STATE.exists():
        return
    try:
        host = Host(json.loads(STATE.read_text()))
    except (OSError, ValueError) as e:
        raise NodeError(f"{STATE} is unreadable ({e}); remove it once the host is clean") from e
    say(
        f"node: a node run ended without its teardown ({STATE}); undoing what it left (its "
        f"logs stay in {host.record.get('logs')})"
    )
    host.kill_recorded()
    problems = host.undo()
    if problems:
        raise NodeError("could not undo a dead node run's changes:\n" + "\n".join(problems))
