"""A real etcd + kube-apiserver for the e2e tier, started the way controller-runtime's envtest does.

The binaries come from ``e2e/build-control-plane.sh`` (built once from the Go module proxy and
cached outside the repo, keyed by the versions pinned in ``e2e/versions.env``).

Flags, as envtest (``pkg/internal/testing/controlplane``) sets them, plus what these tests need:

* etcd: ``--data-dir``, ``--listen-client-urls`` = ``--advertise-client-urls`` on a free loopback
  port, ``--listen-peer-urls=http://localhost:0``, and ``--unsafe-no-fsync`` (envtest probes for
  it; the page cache survives a ``kill -9`` of the process, so nothing a test restarts is lost).
* kube-apiserver: ``--etcd-servers``, ``--cert-dir`` with ``--tls-cert-file`` /
  ``--tls-private-key-file``, ``--client-ca-file``, ``--secure-port`` (free port),
  ``--bind-address=127.0.0.1``, ``--advertise-address=127.0.0.1``,
  ``--endpoint-reconciler-type=none`` (1.37 refuses a loopback address for the endpoints of the
  ``kubernetes`` Service),
  ``--service-cluster-ip-range=10.0.0.0/24``, ``--allow-privileged=true``,
  ``--authorization-mode=RBAC``, ``--disable-admission-plugins=ServiceAccount`` (no controller
  manager runs, so no ``default`` ServiceAccount is ever created; envtest disables it for that
  reason; the living cluster of cluster.py runs one and keeps the plugin),
  ``--service-account-issuer`` / ``--service-account-key-file`` /
  ``--service-account-signing-key-file`` (TokenRequest works: ``kubectl create token``).
  Added here: ``--event-ttl`` (default 1h), ``--etcd-compaction-interval=0`` (the apiserver never
  compacts; tests do it with :meth:`ControlPlane.compact`), optionally ``--watch-cache=false``
  or a watch cache for events (``events_watch_cache=True``, see below).

Certificates: one CA (serving and client auth), a serving cert for 127.0.0.1 / localhost, an
admin client cert ``CN=e2e-admin, O=system:masters``, an RSA service-account key pair.

Events, the watch cache, bookmarks and 410 in the real apiserver (read in the v1.36.3 source; the
smoke tests check each point on both pinned versions, 1.32 and 1.37):

* kube-apiserver DISABLES the watch cache for core/v1 ``events`` and ``events.k8s.io`` events by
  default (``pkg/kubeapiserver/default_storage_factory_builder.go``, ``DefaultWatchCacheSizes``:
  ``events: 0``). Every events LIST and WATCH goes straight to etcd (``storage/etcd3``).
  Consequences for the bridge, all checked by tests/e2e/test_control_plane_smoke.py:

  - A watch from an RV that etcd has compacted gets 410 at once after :meth:`ControlPlane.compact`
    (etcd's ErrCompacted, "The resourceVersion for the provided watch is too old."), no restart.
  - An events watch gets NO periodic BOOKMARKs: the etcd3 watcher only emits the
    ``k8s.io/initial-events-end`` bookmark after initial events (observed for ``resourceVersion=0``
    and ``sendInitialEvents=true``); the API has no way to ask etcd for progress notifications.
    A checkpoint that waits for bookmarks never advances on a quiet default cluster.

* ``events_watch_cache=True`` adds ``--watch-cache-sizes=events#1000,events.events.k8s.io#1000``,
  putting events behind the watch cache as for other resources (``pkg/storage/cacher``):

  - BOOKMARKs go to watchers with ``allowWatchBookmarks=true`` roughly every minute
    (``defaultBookmarkFrequency``) and 2 s before the watch deadline (``timeoutSeconds``), so a
    test asks for ``timeoutSeconds=5`` and gets one ~3 s in. Observed (not fully explained by
    the source): bookmarks came only once the cache had seen an event newer than the watch's
    start RV; a watch from the newest RV on a quiet namespace got none before its deadline.
  - A watch with an RV is served from a sliding window in memory (capacity 100 .. 100*1024,
    grown while the buffered events are younger than 75 s). ``getAllEventsSinceLocked`` answers
    410 "too old resource version: X (Y)" only for RVs older than the window start (the RV of
    the cache's initial LIST while nothing was evicted). Compacting etcd does NOT shrink the
    window (``compactor.go`` only drops list snapshots, every 15 s), so compact() alone is
    hidden: the watch replays compacted history from memory. Restarting the apiserver is what
    reliably makes an old RV "too old": the new cache starts at etcd's current revision.

* :meth:`ControlPlane.make_too_old` works in both modes: it bumps etcd's revision past the RV if
  needed, compacts etcd, ``kill -9``-restarts every running apiserver (same port), and verifies
  with a real watch that the RV now gets 410 before returning.
* The 410 of a watch is a line ``{"type":"ERROR","object":{"kind":"Status","code":410,
  "reason":"Expired",...}}`` inside an HTTP 200 watch stream. A LIST with
  ``resourceVersionMatch=Exact`` of a compacted RV gets a plain HTTP 410.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.support import NotMet, eventually_sync, free_port, write_kubeconfig

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "e2e" / "build-control-plane.sh"
VERSIONS_FILE = REPO / "e2e" / "versions.env"
ADMIN_USER = "e2e-admin"
# what a control plane runs (every e2e test), and what the living cluster adds (cluster.py)
CONTROL_PLANE_BINARIES = ("kube-apiserver", "kubectl", "etcd")
LIVING_BINARIES = ("kube-scheduler", "kube-controller-manager", "kwok")
BINARIES = CONTROL_PLANE_BINARIES + LIVING_BINARIES
# what a real node adds (tests/standins/node.py: ``--node``)
NODE_BINARIES = ("kubelet", "kube-proxy")
VERSIONS_ENV = "K8S_EVENT_BRIDGE_E2E_VERSIONS"
# the versions the tier runs the living cluster on (docs/e2e.md: by default the newest only)
LIVING_ENV = "K8S_EVENT_BRIDGE_E2E_LIVING"
BRIDGE_NAMESPACE = BRIDGE_SERVICE_ACCOUNT = "k8s-event-bridge"  # as deploy/ names them


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or driven."""


class KubectlError(subprocess.CalledProcessError):
    def __str__(self) -> str:
        return (
            f"kubectl {' '.join(self.cmd[1:])} exited {self.returncode}\n"
            f"stdout: {self.stdout}\nstderr: {self.stderr}"
        )


# ----------------------------------------------------------------------------- binaries


def versions() -> dict[str, str]:
    """The pins from e2e/versions.env (KUBERNETES_NEWEST, KUBERNETES_OLDEST, ETCD_VERSION,
    KWOK_VERSION)."""
    out: dict[str, str] = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip().strip("\"'")
    return out


def kubernetes_version(name: str) -> str:
    """``newest`` / ``oldest`` (the pins) or an exact ``v1.X.Y``."""
    v = versions()
    if name in ("newest", "oldest"):
        return v[f"KUBERNETES_{name.upper()}"]
    if name.startswith("v1."):
        return name
    raise ControlPlaneError(f"unknown Kubernetes version {name!r} (newest, oldest or v1.X.Y)")


def selected_versions() -> list[str]:
    """The Kubernetes versions the e2e tier runs on: ``$K8S_EVENT_BRIDGE_E2E_VERSIONS``
    (comma-separated newest, oldest, v1.X.Y), by default both pins, newest first."""
    names = os.environ.get(VERSIONS_ENV, "newest,oldest")
    out: list[str] = []
    for name in names.split(","):
        version = kubernetes_version(name.strip())
        if version not in out:
            out.append(version)
    return out


def living_versions() -> list[str]:
    """The versions whose e2e tests include the living cluster's (``living_cluster``,
    ``own_living_cluster``): ``$K8S_EVENT_BRIDGE_E2E_LIVING`` (comma-separated, as
    ``$K8S_EVENT_BRIDGE_E2E_VERSIONS``), by default the newest only. The oldest version's tier
    proves the API server's list, watch, 410 and RBAC behaviour; the real scheduler, controllers
    and kwok's kubelets writing Events are the newest's."""
    names = os.environ.get(LIVING_ENV, "newest")
    return [kubernetes_version(name.strip()) for name in names.split(",") if name.strip()]


def minor(version: str) -> int:
    """``v1.32.13`` -> 32."""
    return int(version.lstrip("v").split(".")[1])


def bin_dir(version: str | None = None) -> Path:
    """Where build-control-plane.sh puts the binaries of ``version`` (default: the newest)."""
    root = os.environ.get("K8S_EVENT_BRIDGE_CACHE")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(xdg) / "k8s-event-bridge")
    version = version or kubernetes_version("newest")
    return Path(root) / "controlplane" / f"kubernetes-{version}" / "bin"


def binaries_present(version: str | None = None, living: bool = True) -> bool:
    d = bin_dir(version)
    names = BINARIES if living else CONTROL_PLANE_BINARIES
    return all(os.access(d / name, os.X_OK) for name in names)


def ensure_binaries(
    version: str | None = None, stream: bool = False, living: bool = False, node: bool = False
) -> Path:
    """Run e2e/build-control-plane.sh for ``version`` (default: the newest; instant when
    cached) and return its bin directory: the control plane's binaries, with ``living`` the
    living cluster's too (``--living``), with ``node`` the kubelet and kube-proxy (``--node``).

    Raises ControlPlaneError with the end of the build output if the build fails: the e2e tier
    must fail loudly, never skip.
    """
    version = version or kubernetes_version("newest")
    names = (BINARIES if living else CONTROL_PLANE_BINARIES) + (NODE_BINARIES if node else ())
    flags = [*(["--living"] if living else []), *(["--node"] if node else [])]
    cmd = ["bash", str(BUILD_SCRIPT), *flags, version]
    if stream:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True)
        err = ""
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        err = proc.stderr
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = "\n".join(err.strip().splitlines()[-40:])
        raise ControlPlaneError(
            f"e2e/build-control-plane.sh {' '.join([*flags, version])} failed "
            f"(exit {proc.returncode}); the e2e tier needs {', '.join(names)}.\n{tail}"
        )
    path = Path(lines[-1])
    for name in names:
        if not os.access(path / name, os.X_OK):
            raise ControlPlaneError(f"build-control-plane.sh reported {path} but {name} is missing")
    return path


# ----------------------------------------------------------------------------- helpers


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _kill(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait(timeout=10)


class Certs:
    """CA, serving cert, admin client cert and the service-account key pair, as PEM files.

    ``hosts``: more IP addresses the serving cert is valid for (a real node's apiserver listens
    on the host's address); :meth:`issue` signs more leaves with the same CA (a kubelet's client
    and serving certs)."""

    def __init__(self, directory: Path, hosts: Sequence[str] = ()) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        directory.mkdir(parents=True, exist_ok=True)
        self.dir = directory
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        later = now + dt.timedelta(days=2)

        self._now, self._later = now, later

        def write_key(path: Path, key: Any) -> None:
            path.write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
            path.chmod(0o600)

        def write_cert(path: Path, cert: x509.Certificate) -> None:
            path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "k8s-event-bridge e2e CA")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(later)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
            .sign(ca_key, hashes.SHA256())
        )

        def leaf(subject: x509.Name, usage: Any, sans: list[x509.GeneralName] | None) -> tuple:
            key = ec.generate_private_key(ec.SECP256R1())
            b = (
                x509.CertificateBuilder()
                .subject_name(subject)
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now)
                .not_valid_after(later)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                .add_extension(
                    x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
                )
            )
            if sans:
                b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
            return key, b.sign(ca_key, hashes.SHA256())

        serving_key, serving_cert = leaf(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
            ExtendedKeyUsageOID.SERVER_AUTH,
            [
                x509.DNSName("localhost"),
                x509.DNSName("kubernetes"),
                x509.DNSName("kubernetes.default"),
                x509.DNSName("kubernetes.default.svc"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                *(x509.IPAddress(ipaddress.ip_address(h)) for h in hosts),
            ],
        )
        admin_key, admin_cert = leaf(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                    x509.NameAttribute(NameOID.COMMON_NAME, ADMIN_USER),
                ]
            ),
            ExtendedKeyUsageOID.CLIENT_AUTH,
            None,
        )
        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

        self._leaf, self._write_key, self._write_cert = leaf, write_key, write_cert
        self.ca_cert = directory / "ca.crt"
        self.ca_key = directory / "ca.key"
        self.serving_cert = directory / "apiserver.crt"
        self.serving_key = directory / "apiserver.key"
        self.admin_cert = directory / "admin.crt"
        self.admin_key = directory / "admin.key"
        self.sa_key = directory / "sa-signer.key"
        self.sa_pub = directory / "sa-signer.pub"
        write_cert(self.ca_cert, ca_cert)
        write_key(self.ca_key, ca_key)
        write_cert(self.serving_cert, serving_cert)
        write_key(self.serving_key, serving_key)
        write_cert(self.admin_cert, admin_cert)
        write_key(self.admin_key, admin_key)
        write_key(self.sa_key, sa_key)
        self.sa_pub.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        organization: str | None = None,
        server_ips: Sequence[str] = (),
        server_names: Sequence[str] = (),
    ) -> tuple[Path, Path]:
        """Another certificate from the CA: a client cert for ``common_name`` (in
        ``organization``), or with ``server_ips`` / ``server_names`` a serving cert for them.
        Written as ``<name>.crt`` and ``<name>.key``; returns both paths."""
        from cryptography import x509
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        if organization:
            attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
        sans: list[x509.GeneralName] = [
            *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips),
            *(x509.DNSName(n) for n in server_names),
        ]
        usage = ExtendedKeyUsageOID.SERVER_AUTH if sans else ExtendedKeyUsageOID.CLIENT_AUTH
        key, cert = self._leaf(x509.Name(attrs), usage, sans or None)
        crt_path, key_path = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        self._write_cert(crt_path, cert)
        self._write_key(key_path, key)
        return crt_path, key_path

    def admin_ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_cert))
        ctx.load_cert_chain(str(self.admin_cert), str(self.admin_key))
        return ctx


# ----------------------------------------------------------------------------- processes


class Etcd:
    def __init__(self, binary: Path, workdir: Path) -> None:
        self.binary = binary
        self.data_dir = workdir / "etcd-data"
        self.log_path = workdir / "etcd.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def args(self) -> list[str]:
        return [
            str(self.binary),
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={self.url}",
            f"--advertise-client-urls={self.url}",
            "--listen-peer-urls=http://localhost:0",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def start(self, timeout: float = 30) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.args(),
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        proc = self.proc

        def healthy() -> bool:
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"etcd exited with {proc.returncode}:\n{_tail(self.log_path)}"
                )
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                return bool(json.loads(r.read()).get("health") == "true")

        try:
            eventually_sync(healthy, timeout, retry_on=(OSError, ValueError))
        except NotMet:
            raise ControlPlaneError(
                f"etcd not healthy after {timeout}s:\n{_tail(self.log_path)}"
            ) from None

    def stop(self) -> None:
        """kill -9; the data dir stays, so start() resumes with the same data."""
        _kill(self.proc)
        self.proc = None

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One request to etcd's HTTP/JSON gRPC gateway (``/v3/...``)."""
        req = urllib.request.Request(
            f"{self.url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())  # type: ignore[no-any-return]
        except urllib.error.HTTPError as e:
            raise ControlPlaneError(f"etcd {path} {body}: {e.code} {e.read()!r}") from e


class ApiServer:
    """One kube-apiserver process (the primary, or another one against the same etcd)."""

    def __init__(
        self,
        binary: Path,
        workdir: Path,
        name: str,
        certs: Certs,
        etcd: Etcd,
        *,
        event_ttl: str,
        watch_cache: bool,
        events_watch_cache: bool = False,
        issuer: str | None,
        extra_args: Sequence[str],
        kubectl_binary: Path,
        service_account_admission: bool = False,
        address: str = "127.0.0.1",
        authorization_mode: str = "RBAC",
        admission_plugins: Sequence[str] = (),
    ) -> None:
        self.binary = binary
        self.kubectl_binary = kubectl_binary
        self.workdir = workdir
        self.name = name
        self.certs = certs
        self.etcd = etcd
        self.event_ttl = event_ttl
        self.watch_cache = watch_cache
        self.events_watch_cache = events_watch_cache
        self.extra_args = list(extra_args)
        self.service_account_admission = service_account_admission
        self.address = address
        self.authorization_mode = authorization_mode
        self.admission_plugins = list(admission_plugins)
        self.port = free_port()
        self.url = f"https://{address}:{self.port}"
        self.issuer = issuer or f"{self.url}/"
        self.log_path = workdir / f"{name}.log"
        self.cert_dir = workdir / f"{name}-certs"
        self.cert_dir.mkdir(exist_ok=True)
        self.kubeconfig = write_kubeconfig(
            workdir / f"{name}.kubeconfig",
            self.url,
            ca_file=certs.ca_cert,
            user=ADMIN_USER,
            client_cert=certs.admin_cert,
            client_key=certs.admin_key,
            cluster="e2e",
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.last_start_seconds: float | None = None

    def args(self) -> list[str]:
        c = self.certs
        return [
            str(self.binary),
            f"--etcd-servers={self.etcd.url}",
            f"--cert-dir={self.cert_dir}",
            f"--tls-cert-file={c.serving_cert}",
            f"--tls-private-key-file={c.serving_key}",
            f"--client-ca-file={c.ca_cert}",
            f"--secure-port={self.port}",
            f"--bind-address={self.address}",
            f"--advertise-address={self.address}",
            # 1.37 refuses a loopback advertise address for the `kubernetes` Service's endpoints
            # ("may not be in the loopback range"); nothing here reaches the apiserver that way.
            # On another address (a real node's Pods reach it through the Service) it keeps them.
            *(["--endpoint-reconciler-type=none"] if _loopback(self.address) else []),
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            f"--authorization-mode={self.authorization_mode}",
            *(
                [f"--enable-admission-plugins={','.join(self.admission_plugins)}"]
                if self.admission_plugins
                else []
            ),
            *(
                []
                if self.service_account_admission
                else ["--disable-admission-plugins=ServiceAccount"]
            ),
            f"--service-account-issuer={self.issuer}",
            f"--service-account-key-file={c.sa_pub}",
            f"--service-account-signing-key-file={c.sa_key}",
            f"--event-ttl={self.event_ttl}",
            "--etcd-compaction-interval=0",
            f"--watch-cache={'true' if self.watch_cache else 'false'}",
            *(
                ["--watch-cache-sizes=events#1000,events.events.k8s.io#1000"]
                if self.events_watch_cache
                else []
            ),
            *self.extra_args,
        ]

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 90) -> float:
        """Start; wait for /readyz (admin cert) and the kube-system namespace; returns seconds."""
        if self.running:
            return 0.0
        t0 = time.monotonic()
        with self.log_path.open("ab") as log:
            log.write(f"\n===== start {time.strftime('%H:%M:%S')} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.args(),
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        ctx = self.certs.admin_ssl_context()
        proc = self.proc

        def ready() -> bool:
            """/readyz answers 200, then the kube-system namespace is there."""
            if proc.poll() is not None:
                raise ControlPlaneError(
                    f"kube-apiserver {self.name} exited with {proc.returncode}:\n"
                    f"{_tail(self.log_path)}"
                )
            for path in ("/readyz", "/api/v1/namespaces/kube-system"):
                try:
                    with urllib.request.urlopen(f"{self.url}{path}", context=ctx, timeout=5) as r:
                        if r.status != 200:
                            return False
                except urllib.error.HTTPError as exc:  # not ready yet: its response closed
                    exc.close()
                    return False
            return True

        try:
            eventually_sync(ready, t0 + timeout - time.monotonic(), retry_on=(OSError,))
        except NotMet:
            self.stop()
            raise ControlPlaneError(
                f"kube-apiserver {self.name} not ready after {timeout}s:\n{_tail(self.log_path)}"
            ) from None
        self.last_start_seconds = time.monotonic() - t0
        return self.last_start_seconds

    def stop(self) -> None:
        """kill -9, no graceful shutdown (the way a crashed or evicted apiserver goes)."""
        _kill(self.proc)
        self.proc = None

    def restart(self) -> float:
        self.stop()
        return self.start()

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        kubeconfig: Path | str | None = None,
        check: bool = True,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        cmd = [
            str(self.kubectl_binary),
            f"--kubeconfig={kubeconfig or self.kubeconfig}",
            f"--cache-dir={self.workdir / 'kubectl-cache'}",
            *args,
        ]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        proc = subprocess.run(
            cmd, input=input, capture_output=True, text=True, timeout=timeout, env=env
        )
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def request(
        self, method: str, path: str, body: Any = None, timeout: float = 30
    ) -> tuple[int, bytes]:
        """A raw admin HTTPS request; returns (status, body) also for 4xx/5xx."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data else {},
        )
        try:
            with urllib.request.urlopen(
                req, context=self.certs.admin_ssl_context(), timeout=timeout
            ) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()


# ----------------------------------------------------------------------------- control plane


class ControlPlane:
    """etcd + one kube-apiserver (+ optional extra apiservers on the same etcd).

    Everything lives in a fresh temp dir that :meth:`stop` removes (set
    ``K8S_EVENT_BRIDGE_E2E_KEEP=1`` to keep it, with the etcd and apiserver logs).
    """

    LIVING = False  # the binaries it builds when given none: the living cluster's too?

    def __init__(
        self,
        *,
        event_ttl: str = "1h",
        watch_cache: bool = True,
        events_watch_cache: bool = False,
        apiserver_args: Sequence[str] = (),
        bin_path: Path | None = None,
        version: str | None = None,
        service_account_admission: bool = False,
    ) -> None:
        self.version = version or kubernetes_version("newest")
        self.bin = bin_path or ensure_binaries(self.version, living=self.LIVING)
        self.dir = Path(tempfile.mkdtemp(prefix="k8s-event-bridge-e2e-"))
        self.certs = Certs(self.dir / "pki")
        self.etcd = Etcd(self.bin / "etcd", self.dir)
        self.apiserver = ApiServer(
            self.bin / "kube-apiserver",
            self.dir,
            "kube-apiserver",
            self.certs,
            self.etcd,
            event_ttl=event_ttl,
            watch_cache=watch_cache,
            events_watch_cache=events_watch_cache,
            issuer=None,
            extra_args=apiserver_args,
            kubectl_binary=self.bin / "kubectl",
            service_account_admission=service_account_admission,
        )
        self.extra_apiservers: list[ApiServer] = []
        self.start_seconds: float | None = None

    # -- lifecycle

    def start(self) -> ControlPlane:
        t0 = time.monotonic()
        try:
            self.etcd.start()
            self.apiserver.start()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        for a in self.extra_apiservers:
            a.stop()
        self.apiserver.stop()
        self.etcd.stop()
        if os.environ.get("K8S_EVENT_BRIDGE_E2E_KEEP") != "1":
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            print(f"kept control plane dir {self.dir}", file=sys.stderr)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop_apiserver(self) -> None:
        self.apiserver.stop()

    def start_apiserver(self) -> float:
        """Start the apiserver again (same port, certs, etcd); returns seconds to ready."""
        return self.apiserver.start()

    def restart_apiserver(self) -> float:
        return self.apiserver.restart()

    def stop_etcd(self) -> None:
        self.etcd.stop()

    def start_etcd(self) -> None:
        self.etcd.start()

    def add_apiserver(
        self,
        *,
        event_ttl: str | None = None,
        watch_cache: bool | None = None,
        events_watch_cache: bool | None = None,
        extra_args: Sequence[str] = (),
        start: bool = True,
    ) -> ApiServer:
        """Another kube-apiserver on the same etcd, certs and SA keys, on its own port.

        E.g. write Events while the primary is down, or with a short ``event_ttl`` (the TTL is a
        property of the apiserver that writes the Event). Stopped by :meth:`stop`.
        """
        a = ApiServer(
            self.bin / "kube-apiserver",
            self.dir,
            f"kube-apiserver-{len(self.extra_apiservers) + 2}",
            self.certs,
            self.etcd,
            event_ttl=event_ttl or self.apiserver.event_ttl,
            watch_cache=self.apiserver.watch_cache if watch_cache is None else watch_cache,
            events_watch_cache=(
                self.apiserver.events_watch_cache
                if events_watch_cache is None
                else events_watch_cache
            ),
            issuer=self.apiserver.issuer,
            extra_args=extra_args,
            kubectl_binary=self.bin / "kubectl",
            service_account_admission=self.apiserver.service_account_admission,
        )
        self.extra_apiservers.append(a)
        if start:
            a.start()
        return a

    # -- access

    @property
    def url(self) -> str:
        return self.apiserver.url

    @property
    def port(self) -> int:
        return self.apiserver.port

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (client cert in system:masters)."""
        return self.apiserver.kubeconfig

    @property
    def ca_file(self) -> Path:
        return self.certs.ca_cert

    @property
    def etcd_url(self) -> str:
        return self.etcd.url

    def ssl_context(self) -> ssl.SSLContext:
        """Trusts the CA and presents the admin client cert."""
        return self.certs.admin_ssl_context()

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: Path | str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl (admin kubeconfig unless ``kubeconfig``); raises KubectlError on a
        non-zero exit unless ``check=False``."""
        return self.apiserver.kubectl(
            *args, input=input, check=check, kubeconfig=kubeconfig, timeout=timeout
        )

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        return self.apiserver.request(method, path, body)

    def service_account_kubeconfig(
        self, namespace: str, name: str, *, duration: str = "2h", server: ApiServer | None = None
    ) -> Path:
        """A kubeconfig with a TokenRequest token for ServiceAccount ``namespace/name`` (which
        must exist) and the CA file."""
        token = self.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}")
        target = server or self.apiserver
        return write_kubeconfig(
            self.dir / f"sa-{namespace}-{name}-{target.port}.kubeconfig",
            target.url,
            ca_file=self.certs.ca_cert,
            user=f"system:serviceaccount:{namespace}:{name}",
            token=token.stdout.strip(),
            cluster="e2e",
        )

    def deployed_bridge_kubeconfig(self) -> Path:
        """deploy/ applied (as an operator would); a kubeconfig with a token for the bridge's
        ServiceAccount, so the bridge runs under exactly the RBAC deploy/ grants."""
        self.kubectl("apply", "-k", str(REPO / "deploy"))
        return self.service_account_kubeconfig(BRIDGE_NAMESPACE, BRIDGE_SERVICE_ACCOUNT)

    # -- etcd revisions and compaction

    def current_revision(self) -> int:
        """etcd's current revision (from a range response header)."""
        resp = self.etcd.call("/v3/kv/range", {"key": _b64("/"), "limit": 1})
        return int(resp["header"]["revision"])

    def bump_revision(self) -> int:
        """One etcd write outside the apiserver's /registry prefix; returns the new revision."""
        resp = self.etcd.call(
            "/v3/kv/put",
            {"key": _b64("/k8s-event-bridge-e2e/bump"), "value": _b64(str(time.time()))},
        )
        return int(resp["header"]["revision"])

    def compact(self, revision: int | None = None) -> int:
        """Compact etcd (physical) at ``revision`` (default: current); returns the revision.

        Compacting at a revision that was already compacted is not an error here. etcd keeps
        the compact revision itself: a watch from RV r (which starts at r + 1) is refused only
        when compacted at r + 2 or later; :meth:`bump_revision` first if nothing else wrote.
        """
        rev = self.current_revision() if revision is None else revision
        try:
            self.etcd.call("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        except ControlPlaneError as e:
            if "required revision has been compacted" not in str(e):
                raise
        return rev

    def make_too_old(self, resource_version: int | str, timeout: float = 60) -> None:
        """Make a watch from ``resource_version`` get 410 Expired, reliably.

        Bumps etcd's revision to rv + 2 or more, compacts etcd at the current revision, restarts
        the apiserver (kill -9, same port) so that its watch cache starts fresh at the current
        revision, and verifies with a real events watch that the RV now gets the 410 ERROR.
        Extra apiservers are restarted too so none of them serves it from memory.
        """
        rv = int(resource_version)
        # etcd keeps the compact revision itself watchable: a watch from rv starts at rv + 1, so
        # it is refused only when compacted at rv + 2 or later.
        while self.current_revision() < rv + 2:
            self.bump_revision()
        self.compact()
        for a in [self.apiserver, *self.extra_apiservers]:
            if a.running:
                a.restart()

        last = ""

        def expired() -> bool:
            """A watch from rv gets 410 (or an ERROR 410 in a 200); False on a 429 (the new
            watch cache initializes); a watch that starts is a failure at once."""
            nonlocal last
            status, body = self.request(
                "GET", f"/api/v1/events?watch=1&resourceVersion={rv}&timeoutSeconds=1"
            )
            last = f"{status} {body[:300]!r}"
            if status == 200:
                for line in body.splitlines():
                    ev = json.loads(line)
                    if ev.get("type") == "ERROR" and ev["object"].get("code") == 410:
                        return True
                raise ControlPlaneError(f"watch from RV {rv} did not get 410: {last}")
            return status == 410

        try:
            eventually_sync(expired, timeout, 0.2, retry_on=())
        except NotMet:
            raise ControlPlaneError(
                f"watch from RV {rv} did not get 410 in {timeout}s: {last}"
            ) from None


def _loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


@contextlib.contextmanager
def control_plane(**kwargs: Any) -> Iterator[ControlPlane]:
    cp = ControlPlane(**kwargs).start()
    try:
        yield cp
    finally:
        cp.stop()
