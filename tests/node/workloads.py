"""What the node tier installs from deploy/ and the chart, as the docs say, and what it reads
back (tests/node/test_chart.py, test_deploy.py, test_subscribers.py, test_token.py).

- :class:`SecuredNats`: NATS as docs/deploy.md sets it up ("Using the fragment"): nats-server
  with JetStream on the host's address (the Pods reach it there), deploy/nats/nats-server.conf
  included as shipped, each program's password in the server's environment, and an operator's
  user (every right) that provisions and reads back, as an operator's own credentials do.
- :func:`overlay`: a kustomize overlay on a base of this repository, written as docs/deploy.md's
  overlay is (``images:``, a ``configMapGenerator`` replacing the config).
- :func:`docs_helm_install`: the ``helm install`` command a page of the docs shows, as argv.
- :class:`Api`: the node's API server for what kubectl does not do well: a token's identity
  (``SelfSubjectReview``), a Pod's last status as a watch delivers it (:class:`PodWatch`), and
  :class:`Truth`, tests/e2e/truth.py's independent watch of every Event version, in a thread.
- :func:`assert_carried`: every Event version the API server had is in the stream once.
- What the session fixtures of tests/node/installs.py install and undo: :func:`deploy` (deploy/
  with its NATS), :func:`warnings_of_the_cluster` (what makes the cluster write Warnings: an
  unschedulable Pod, a crash loop, an OOM kill) and :func:`installed` (the chart by a page's
  command).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from k8s_event_sim.natsserver import NatsServer
from tests import provisioning
from tests.e2e.truth import Truth as _Truth
from tests.integration.harness import stream_messages
from tests.support import eventually_sync, free_port
from tools import natsperms

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
CONSUMERS = DEPLOY / "consumers"
CHART = DEPLOY / "helm" / "k8s-event-bridge"
CRDS = REPO / "tests" / "data" / "crds"
NAMESPACE = "k8s-event-bridge"  # deploy/'s
BRIDGE = "k8s-event-bridge"  # deploy/'s Deployment, Lease, ServiceAccount
OPERATOR = "operator"  # not a program: the operator's user of the account
STREAM = "K8S_EVENTS"
SEEN_BUCKET = "k8s_event_remediation"
TOKEN_VOLUME = "kube-api-access"  # the projected token volume of deploy/ and the chart
EVENTS_NAMESPACE = "default"  # where cluster_events runs: deploy/consumers' worker acts there
MAKER = {"app.kubernetes.io/part-of": "node-tier-events"}


# ----------------------------------------------------------------------------- NATS


class SecuredNats:
    """nats-server -js on ``host`` with deploy/nats/nats-server.conf included as docs/deploy.md
    shows, a password per program and an operator's user (see the module docstring)."""

    def __init__(self, host: str, workdir: Path) -> None:
        self.host = host
        self.dir = workdir
        self.port = free_port()
        self.passwords = {p: "p" + secrets.token_hex(16) for p in (*natsperms.PROGRAMS, OPERATOR)}
        self.server: NatsServer | None = None

    @property
    def url(self) -> str:
        """What the programs' configs name (their users and passwords come from elsewhere)."""
        return f"nats://{self.host}:{self.port}"

    @property
    def operator_url(self) -> str:
        return f"nats://{OPERATOR}:{self.passwords[OPERATOR]}@{self.host}:{self.port}"

    @property
    def log(self) -> Path:
        return self.dir / "nats-server.log"

    def start(self) -> SecuredNats:
        self.dir.mkdir(parents=True, exist_ok=True)
        variable = natsperms.password_variable(OPERATOR)
        operator = f'      {{"user": "{OPERATOR}", "password": ${variable}}},\n'
        fragment = natsperms.CONF.read_text().replace(
            '    "users": [\n', '    "users": [\n' + operator, 1
        )
        assert operator in fragment, "deploy/nats/nats-server.conf: no users list to add to"
        (self.dir / "k8s-event-bridge.conf").write_text(fragment)
        # docs/deploy.md "Using the fragment": the server's own config enables JetStream and
        # includes the fragment
        (self.dir / "nats.conf").write_text(
            f'listen: "{self.host}:{self.port}"\n'
            f'jetstream {{ store_dir: "{self.dir / "store"}" }}\n'
            "include ./k8s-event-bridge.conf\n"
        )
        env = {natsperms.password_variable(p): pw for p, pw in self.passwords.items()}
        self.server = NatsServer(
            str(self.dir), self.port, host=self.host, config=self.dir / "nats.conf", env=env
        ).start(15)
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def provision_bridge(self, config: Path, *args: str) -> str:
        """``k8s-event-bridge provision --config FILE`` with the operator's credentials, as
        docs/deploy.md says; its log."""
        return asyncio.run(
            provisioning.bridge(
                [self.url],
                user=OPERATOR,
                password=self.passwords[OPERATOR],
                args=("--config", str(config), *args),
            )
        )

    def provision_subscriber(
        self, module: str, config: Path, env: dict[str, str] | None = None
    ) -> str:
        """The subscriber's ``provision --config FILE`` with the operator's credentials."""
        return asyncio.run(
            provisioning.subscriber(
                module,
                config,
                [self.url],
                user=OPERATOR,
                password=self.passwords[OPERATOR],
                env=env,
            )
        )

    def messages(self, subject: str) -> list[tuple[str, dict[str, str], bytes]]:
        """Every message of the stream on ``subject``, read as the operator."""
        return asyncio.run(stream_messages(self.operator_url, STREAM, subject))

    def event_ids(self, cluster: str) -> list[str]:
        """The id (``Nats-Msg-Id``, the CloudEvent's id) of every Event of ``cluster`` in the
        stream, in stream order; status events left out."""
        found = asyncio.run(
            stream_messages(self.operator_url, STREAM, f"k8s.events.{cluster}.>", headers_only=True)
        )
        return [h["Nats-Msg-Id"] for s, h, _ in found if "._bridge." not in s]

    def status_events(self, cluster: str, what: str) -> list[dict[str, Any]]:
        """The data of the bridge's status events ``what`` (``leader_changed``, ``stopped``)."""
        found = self.messages(f"k8s.events.{cluster}._bridge.{what}")
        return [_data(h, b) for _, h, b in found]

    def consumer_info(self, durable: str) -> Any:
        async def info() -> Any:
            import nats

            nc = await nats.connect(self.operator_url)
            try:
                return await nc.jetstream().consumer_info(STREAM, durable)
            finally:
                await nc.close()

        return asyncio.run(info())


def _data(headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """A CloudEvent's data in either content mode."""
    doc = json.loads(body)
    if "ce-id" in headers:
        return doc  # type: ignore[no-any-return]
    return doc["data"]  # type: ignore[no-any-return]


# ------------------------------------------------------------------ install as documented


def overlay(where: Path, base: Path, kustomization: dict[str, Any], files: dict[str, str]) -> Path:
    """An overlay of ``base`` in ``where``, as docs/deploy.md writes one (kustomize refuses an
    absolute path to a base: the path is relative)."""
    where.mkdir(parents=True, exist_ok=True)
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(base, where)],
        **kustomization,
    }
    (where / "kustomization.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    for name, text in files.items():
        (where / name).write_text(text)
    return where


def image_parts(tag: str) -> tuple[str, str]:
    """``name:tag`` split for kustomize's ``images`` and the chart's ``image.*``."""
    name, _, version = tag.rpartition(":")
    if not name or "/" in version:
        return tag, "latest"
    return name, version


def config_of(path: Path, kind: str, name: str, key: str) -> dict[str, Any]:
    """The YAML config a ConfigMap of a manifest file holds under ``key``."""
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc["kind"] == kind and doc["metadata"]["name"] == name:
            return yaml.safe_load(doc["data"][key])  # type: ignore[no-any-return]
    raise AssertionError(f"{path.relative_to(REPO)}: no {kind} {name}")


def docs_helm_install(page: Path) -> list[str]:
    """The first ``helm install`` command of ``page`` (a shell block of the README or a doc),
    as argv: continued lines joined, comments dropped."""
    blocks = re.findall(r"^```sh\n(.*?)^```", page.read_text(), re.M | re.S)
    for block in blocks:
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            if line.strip().startswith("helm install"):
                return shlex.split(line, comments=True)
    raise AssertionError(f"{page.relative_to(REPO)} shows no helm install")


def as_run_here(
    argv: list[str], *, release: str, namespace: str, image: str, nats_url: str
) -> list[str]:
    """The documented command with what this machine needs and nothing else: the image that
    is on the node (``image.repository``, ``image.tag``), the NATS server's address
    (``config.nats.servers``), the release's name and namespace (see tests/node/test_chart.py
    for why), and the chart's path from here. Every other argument is kept as written; a
    command that no longer sets the image or NATS is an error (the docs changed)."""
    assert argv[:2] == ["helm", "install"], argv
    repository, tag = image_parts(image)
    out = ["install", release, str(REPO / argv[3])]
    args = argv[4:]
    seen: set[str] = set()
    i = 0
    while i < len(args):
        a = args[i]
        value = args[i + 1] if i + 1 < len(args) else ""
        if a in ("-n", "--namespace"):
            out += [a, namespace]
            seen.add("namespace")
        elif a == "--set" and value.startswith("image.repository="):
            out += [a, f"image.repository={repository}"]
            seen.add("image")
        elif a == "--set" and value.startswith("image.tag="):
            i += 2
            continue  # set below, from the node's image
        elif a == "--set-json" and value.startswith("config.nats.servers="):
            out += [a, "config.nats.servers=" + json.dumps([nats_url])]
            seen.add("nats")
        elif a.startswith("-") and value and not value.startswith("-") and a not in _FLAGS:
            out += [a, value]
        else:
            out.append(a)
            i += 1
            continue
        i += 2
    missing = {"namespace", "image", "nats"} - seen
    assert not missing, f"the documented command no longer sets {sorted(missing)}: {argv}"
    return [*out, "--set", f"image.tag={tag}"]


_FLAGS = {"--create-namespace", "--wait", "--atomic", "--dry-run"}  # helm flags without a value


# ----------------------------------------------------------------------------- the API server


class Api:
    """The node's API server at the admin kubeconfig's address, for raw requests."""

    def __init__(self, kubeconfig: Path) -> None:
        doc = yaml.safe_load(kubeconfig.read_text())
        ctx_name = doc["current-context"]
        ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"])
        self.url: str = cluster["server"]
        self.ca = _file(kubeconfig.parent, cluster, "certificate-authority")
        self.cert = _file(kubeconfig.parent, user, "client-certificate")
        self.key = _file(kubeconfig.parent, user, "client-key")

    def ssl_context(self, admin: bool = True) -> ssl.SSLContext:
        """Trusts the cluster's CA; presents the admin's client certificate unless told."""
        ctx = ssl.create_default_context(cafile=self.ca)
        if admin and self.cert and self.key:
            ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def whoami(self, token: str) -> tuple[int, str]:
        """A ``SelfSubjectReview`` with ``token`` alone: (200 or 201, the user name) while the
        API server takes the token, (401, '') once it does not."""
        body = json.dumps(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        ).encode()
        req = urllib.request.Request(
            f"{self.url}/apis/authentication.k8s.io/v1/selfsubjectreviews",
            data=body,
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(
                req, context=self.ssl_context(admin=False), timeout=10
            ) as r:
                doc = json.loads(r.read())
                return r.status, str(doc["status"]["userInfo"]["username"])
        except urllib.error.HTTPError as e:
            return e.code, ""


def _file(base: Path, entry: dict[str, Any], key: str) -> str | None:
    """A kubeconfig's file entry (or its ``-data`` written to a file next to it)."""
    if entry.get(key):
        path = Path(entry[key])
        return str(path if path.is_absolute() else base / path)
    data = entry.get(f"{key}-data")
    if not data:
        return None
    out = base / f".{key}-{os.getpid()}.pem"
    out.write_bytes(base64.b64decode(data))
    out.chmod(0o600)
    return str(out)


class Truth:
    """tests/e2e/truth.py's watch of every core/v1 Event version, from now on, run in a thread
    of its own so the (synchronous) tests can read it at any time."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self._truth: _Truth | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="events-truth", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            async with _Truth(self.api) as truth:  # type: ignore[arg-type]
                self._truth = truth
                self._ready.set()
                await self._stop.wait()

        try:
            asyncio.run(main())
        except BaseException as e:  # handed to the reader
            self._error = e
            self._ready.set()

    def start(self) -> Truth:
        self._thread.start()
        self._ready.wait(30)
        self._check()
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(15)

    def _check(self) -> None:
        if self._error is not None:
            raise AssertionError(f"the Events' watch failed: {self._error!r}")
        assert self._truth is not None, "the Events' watch did not start"
        task = self._truth._task
        if task is not None and task.done() and not task.cancelled() and task.exception():
            raise AssertionError(f"the Events' watch failed: {task.exception()!r}")

    def versions(self) -> dict[str, dict[str, Any]]:
        """``"<uid>/<rv>"`` -> the Event, every version seen so far."""
        self._check()
        assert self._truth is not None
        return dict(self._truth.versions)

    def of(self, reason: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.versions().values()
            if e.get("reason") == reason
            and (namespace is None or e["metadata"]["namespace"] == namespace)
        ]


def current_events(node: Any) -> dict[str, dict[str, Any]]:
    """``"<uid>/<rv>"`` -> the Event, for every Event the API server holds now."""
    items = json.loads(node.kubectl("get", "events", "-A", "-o", "json"))["items"]
    return {f"{e['metadata']['uid']}/{e['metadata']['resourceVersion']}": e for e in items}


def assert_carried(
    nats: SecuredNats,
    cluster: str,
    versions: Callable[[], dict[str, dict[str, Any]]],
    timeout: float = 90,
) -> dict[str, dict[str, Any]]:
    """Every Event version ``versions()`` gives (asked again at each try: new ones keep coming)
    is in the stream of ``cluster``, and no id is there twice. Returns the last versions."""
    last: dict[str, dict[str, Any]] = {}

    def carried() -> bool:
        last.clear()
        last.update(versions())
        return set(last) <= set(nats.event_ids(cluster))

    try:
        eventually_sync(carried, timeout, 0.5, what="every version in the stream")
    except AssertionError:
        ids = set(nats.event_ids(cluster))
        missing = sorted(
            (e["metadata"]["namespace"], e["reason"], i) for i, e in last.items() if i not in ids
        )
        raise AssertionError(
            f"{len(missing)} of {len(last)} not in the stream: {missing}"
        ) from None
    ids = nats.event_ids(cluster)
    dups = sorted({i for i in ids if ids.count(i) > 1})
    assert not dups, f"in the stream more than once: {dups}"
    return last


class PodWatch:
    """A watch of one Pod from now on, in a thread: every object it delivers (the last one
    carries the Pod's final status, which is gone from the API once the Pod is)."""

    def __init__(self, api: Api, namespace: str, name: str) -> None:
        self.api = api
        self.url = (
            f"{api.url}/api/v1/namespaces/{namespace}/pods?watch=1"
            f"&fieldSelector=metadata.name%3D{name}&timeoutSeconds=300"
        )
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._open = threading.Event()

    def _run(self) -> None:
        req = urllib.request.Request(self.url)
        with urllib.request.urlopen(req, context=self.api.ssl_context(), timeout=330) as r:
            self._open.set()
            for line in r:
                ev = json.loads(line)
                self.seen.append((ev["type"], ev["object"]))
                if ev["type"] == "DELETED":
                    return

    def __enter__(self) -> PodWatch:
        self._thread.start()
        assert self._open.wait(10), "the Pod's watch did not open"
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join(1)

    def deleted(self) -> dict[str, Any] | None:
        """The Pod as the watch's DELETED event has it, once the Pod is gone."""
        for kind, obj in self.seen:
            if kind == "DELETED":
                return obj
        return None


# ----------------------------------------------------------------------------- Pods


def pods(node: Any, namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = node.get("pods", "-n", namespace, "-l", selector)["items"]
    return sorted(items, key=lambda p: p["metadata"]["name"])


def ready(pod: dict[str, Any]) -> bool:
    conds = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


def container_status(pod: dict[str, Any], name: str) -> dict[str, Any]:
    for s in pod.get("status", {}).get("containerStatuses") or []:
        if s["name"] == name:
            return s  # type: ignore[no-any-return]
    raise AssertionError(f"pod {pod['metadata']['name']}: no status of container {name}")


def http_get(pod: dict[str, Any], path: str, port: int = 8080) -> tuple[int, str]:
    """``GET http://<Pod IP>:<port><path>`` from the host, as the kubelet's probes do."""
    url = f"http://{pod['status']['podIP']}:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of a Prometheus text exposition's samples of ``name`` with ``labels``."""
    total = 0.0
    for line in text.splitlines():
        m = re.fullmatch(r"([a-zA-Z_:][\w:]*)(\{(.*)\})? (\S+)", line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(4))
    return total


def lease(node: Any, namespace: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = node.get("lease", name, "-n", namespace)["spec"]
    return spec


def log_lines(text: str) -> list[dict[str, Any]]:
    """The JSON log lines of a program (other lines left out)."""
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            doc = json.loads(line)
            if isinstance(doc, dict):
                out.append(doc)
    return out


def jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))  # type: ignore[no-any-return]


def timestamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class LogFollower:
    """``kubectl logs -f`` of a container from now until it exits (a deleted Pod's log is gone
    with the Pod)."""

    def __init__(self, node: Any, namespace: str, pod: str, container: str) -> None:
        self.argv = [
            str(node.bin / "kubectl"), "--kubeconfig", str(node.kubeconfig),
            "logs", "-f", pod, "-n", namespace, "-c", container,
        ]  # fmt: skip
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> LogFollower:
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        return self

    def output(self, timeout: float = 60) -> str:
        assert self.proc is not None
        out, _ = self.proc.communicate(timeout=timeout)
        return out

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)


# ----------------------------------------------------------------------------- deploy/


@dataclass
class Deployed:
    """deploy/ applied through :func:`overlay`, its NATS, and the truth of the cluster's Events
    from the moment its leader was ready."""

    node: Any
    nats: SecuredNats
    overlay: Path
    cluster: str
    api: Api
    truth: Truth
    config: dict[str, Any] = field(default_factory=dict)

    def pods(self) -> list[dict[str, Any]]:
        return pods(
            self.node,
            NAMESPACE,
            "app.kubernetes.io/name=k8s-event-bridge,app.kubernetes.io/component=bridge",
        )

    def holder(self) -> str:
        return str(lease(self.node, NAMESPACE, BRIDGE).get("holderIdentity") or "")

    def both_ready(self) -> list[dict[str, Any]]:
        """Until the Deployment's two Pods are Ready (and none is terminating)."""

        def two() -> list[dict[str, Any]] | None:
            found = [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]
            return found if len(found) == 2 and all(ready(p) for p in found) else None

        return eventually_sync(two, 180, 1, what="both bridge replicas Ready")

    def carried(self, timeout: float = 90) -> dict[str, dict[str, Any]]:
        """Every Event version since the leader was ready, and every Event the API server
        holds now, is in the stream once."""
        return assert_carried(
            self.nats, self.cluster, lambda: {**self.truth.versions(), **current_events(self.node)},
            timeout,
        )  # fmt: skip


def deploy_overlay(where: Path, image: str, nats: SecuredNats) -> tuple[Path, dict[str, Any]]:
    """deploy/ as docs/deploy.md's overlay makes it, with only what this cluster needs:

    - ``images``: the image the node has (the docs' overlay names the user's registry). Its
      ``imagePullPolicy`` stays ``IfNotPresent``: the image is on the node, nothing is pulled.
    - the config through the docs' ``configMapGenerator`` (``behavior: replace``): the base's
      own ``bridge.yaml`` with only ``nats.servers`` set to the NATS server on the host's
      address (no cluster DNS here, and no NATS Service: an address).

    Nothing else: no DNS policy (the NATS and API server addresses are IPs; the kubelet gives a
    Pod of ``ClusterFirst`` the host's resolver when there is no cluster DNS), the namespace,
    the user, the probes, the token and the security context as shipped."""
    config = config_of(DEPLOY / "configmap.yaml", "ConfigMap", BRIDGE, "bridge.yaml")
    config["nats"]["servers"] = [nats.url]
    name, tag = image_parts(image)
    path = overlay(
        where,
        DEPLOY,
        {
            "images": [
                {"name": "images.example.com/k8s-event-bridge", "newName": name, "newTag": tag}
            ],
            "configMapGenerator": [
                {
                    "name": BRIDGE,
                    "namespace": NAMESPACE,
                    "behavior": "replace",
                    "files": ["bridge.yaml"],
                }
            ],
        },
        {"bridge.yaml": yaml.safe_dump(config, sort_keys=False)},
    )
    return path, config


def secret(node: Any, namespace: str, name: str, **data: str) -> None:
    """``kubectl create secret generic`` as the docs show it (``--from-literal``)."""
    literals = [f"--from-literal={k.replace('_', '-')}={v}" for k, v in data.items()]
    node.kubectl("-n", namespace, "create", "secret", "generic", name, *literals)


@contextlib.contextmanager
def deploy(node: Any, work: Path) -> Iterator[Deployed]:
    """deploy/ installed as docs/deploy.md says: NATS with the shipped permissions, the stream
    and buckets provisioned by ``k8s-event-bridge provision`` with the operator's credentials,
    the bridge's password in the Secret ``k8s-event-bridge-nats``, ``kubectl apply -k`` of the
    overlay, ``kubectl rollout status``; then the truth of the cluster's Events recorded."""
    nats = SecuredNats(node.host, work / "nats").start()
    api = Api(Path(node.kubeconfig))
    truth = Truth(api)
    path, config = deploy_overlay(work / "overlay", node.image, nats)
    try:
        cfg = work / "bridge.yaml"
        cfg.write_text(yaml.safe_dump(config))
        nats.provision_bridge(cfg, "--seen-bucket", SEEN_BUCKET)
        # the Secret lives in the bridge's namespace; made first, so that the Pods start with it
        # (the docs: the bridge reads it at start)
        node.kubectl("create", "namespace", NAMESPACE)
        secret(node, NAMESPACE, "k8s-event-bridge-nats", password=nats.passwords[BRIDGE])
        node.kubectl("apply", "-k", str(path))
        node.kubectl(
            "-n", NAMESPACE, "rollout", "status", f"deploy/{BRIDGE}", "--timeout=240s",
            timeout=260,
        )  # fmt: skip
        d = Deployed(node, nats, path, config["cluster"]["name"], api, truth, config)
        d.both_ready()
        eventually_sync(d.holder, 60, 0.5, what="a replica holds the Lease")
        truth.start()
        yield d
    finally:
        truth.stop()
        node.kubectl("delete", "-k", str(path), "--ignore-not-found", "--wait=true",
                     timeout=240, check=False)  # fmt: skip
        node.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", timeout=180,
                     check=False)  # fmt: skip
        nats.stop()


# -------------------------------------------------------------------- the cluster's Warnings


CRASH_LOOP = "crash-loop"
OOM = "oom"
UNSCHEDULABLE = "unschedulable"
OOM_LIMIT_MIB = 48


def _maker_pod_spec(image: str, name: str, command: list[str], memory: str) -> dict[str, Any]:
    """A Pod of the application image that runs ``command``, restricted as the bridge is."""
    return {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": name,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": command,
                "resources": {"requests": {"memory": memory}, "limits": {"memory": memory}},
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }


def _deployment(image: str, name: str, command: list[str], memory: str) -> dict[str, Any]:
    labels = {"app": name, **MAKER}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": EVENTS_NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": _maker_pod_spec(image, name, command, memory),
            },
        },
    }


@dataclass
class ClusterEvents:
    """What makes the cluster write Warnings of its own, in ``default``."""

    node: Any
    namespace: str = EVENTS_NAMESPACE

    def pods_of(self, app: str) -> list[dict[str, Any]]:
        return pods(self.node, self.namespace, f"app={app}")


@contextlib.contextmanager
def warnings_of_the_cluster(node: Any) -> Iterator[ClusterEvents]:
    """Started once the bridge of deploy/ leads, left running for the session (the crash loop
    and the OOM kill are what the remediation worker acts on later, and their counts grow):

    - a Pod no node matches (``nodeSelector``): the scheduler's ``FailedScheduling``;
    - a Deployment of the image whose container exits 3 at once: the kubelet's ``BackOff``;
    - a Deployment of the image whose container writes 256 MiB under a limit of
      ``OOM_LIMIT_MIB``: the kernel kills it (``OOMKilled``), then ``BackOff``."""
    crash = ["python", "-c", "import sys; print('crashing on purpose'); sys.exit(3)"]
    oom = ["python", "-c", "x = 'x' * (256 << 20); print(len(x))"]
    objects = [
        _deployment(node.image, CRASH_LOOP, crash, "64Mi"),
        _deployment(node.image, OOM, oom, f"{OOM_LIMIT_MIB}Mi"),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": UNSCHEDULABLE, "namespace": EVENTS_NAMESPACE, "labels": MAKER},
            "spec": {
                **_maker_pod_spec(node.image, "idle", ["python", "-c", "pass"], "32Mi"),
                "nodeSelector": {"node-tier.k8s-event-bridge.io/no-such-node": "true"},
            },
        },
    ]
    node.apply({"apiVersion": "v1", "kind": "List", "items": objects})
    try:
        yield ClusterEvents(node)
    finally:
        selector = ",".join(f"{k}={v}" for k, v in MAKER.items())
        node.kubectl("-n", EVENTS_NAMESPACE, "delete", "deployment,pod", "-l", selector,
                     "--wait=true", "--ignore-not-found", timeout=180, check=False)  # fmt: skip


# ----------------------------------------------------------------------------- the chart


@dataclass
class Release:
    """A chart release installed by the documented command, and what it started with."""

    node: Any
    name: str
    namespace: str
    nats: SecuredNats
    argv: list[str]
    cluster: str
    # each Pod's container and first token, as installed
    first: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def fullname(self) -> str:
        return f"{self.name}-k8s-event-bridge"

    def pods(self) -> list[dict[str, Any]]:
        return pods(
            self.node,
            self.namespace,
            f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component=bridge",
        )

    def holder(self) -> str:
        return str(lease(self.node, self.namespace, self.fullname).get("holderIdentity") or "")

    def token(self, pod: str) -> str:
        path = self.node.pod_volume_path(self.namespace, pod, TOKEN_VOLUME) / "token"
        return str(path.read_text())


def install(node: Any, work: Path, page: Path, release: str) -> Release:
    """The chart installed with ``page``'s ``helm install`` command (:func:`as_run_here`), as
    the docs say around it: NATS with the shipped permissions, the stream provisioned with the
    config the chart renders, the bridge's password in ``<fullname>-nats``; Ready."""
    nats = SecuredNats(node.host, work / "nats").start()
    namespace = release
    argv = as_run_here(
        docs_helm_install(page), release=release, namespace=namespace, image=node.image,
        nats_url=nats.url,
    )  # fmt: skip
    try:
        rendered = node.helm("template", *argv[1:], "--show-only", "templates/configmap.yaml")
        config = yaml.safe_load(yaml.safe_load(rendered)["data"]["bridge.yaml"])
        cfg = work / "bridge.yaml"
        cfg.write_text(yaml.safe_dump(config))
        nats.provision_bridge(cfg)
        r = Release(node, release, namespace, nats, argv, config["cluster"]["name"])
        node.kubectl("create", "namespace", namespace)
        secret(node, namespace, f"{r.fullname}-nats", password=nats.passwords[BRIDGE])
        node.helm(*argv)
        node.kubectl(
            "-n", namespace, "rollout", "status", f"deploy/{r.fullname}", "--timeout=240s",
            timeout=260,
        )  # fmt: skip
        api = Api(Path(node.kubeconfig))
        for p in r.pods():
            name = p["metadata"]["name"]
            token = r.token(name)
            r.first[name] = {
                "containerID": container_status(p, "bridge")["containerID"],
                "token": token,
                "user": api.whoami(token),  # the API server takes it now
            }
        return r
    except BaseException:
        uninstall(node, release, namespace, nats)
        raise


def uninstall(node: Any, release: str, namespace: str, nats: SecuredNats) -> None:
    node.helm("uninstall", release, "-n", namespace, "--wait", check=False)
    node.kubectl("delete", "namespace", namespace, "--ignore-not-found", timeout=180, check=False)
    nats.stop()


@contextlib.contextmanager
def installed(node: Any, work: Path, page: Path, release: str) -> Iterator[Release]:
    """:func:`install`, then :func:`uninstall`."""
    r = install(node, work, page, release)
    try:
        yield r
    finally:
        uninstall(node, r.name, r.namespace, r.nats)
