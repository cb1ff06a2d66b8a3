"""deploy/ on a real node, as docs/deploy.md installs it (tests/node/installs.py ``deployed``: NATS
with the shipped permissions, ``k8s-event-bridge provision``, the password's Secret, ``kubectl
apply -k`` of an overlay that sets only the image and the NATS address, ``rollout status``).

In the order they run (one Deployment for the file; each test leaves it with two Ready
replicas):

- both replicas Ready through their probes, one leading, the other standing by;
- the Warnings the cluster writes itself (the scheduler's ``FailedScheduling``, the kubelet's
  ``BackOff`` of a container of the image that exits at once) are in the stream, and every
  Event version the API server had since the leader was ready, and every Event it holds, is
  there exactly once;
- from the host, through the container's pid: the bridge's user and groups (65532), no
  capability, no new privileges, seccomp, the read-only root, the projected token;
- a real SIGKILL of the leader's process: the kubelet restarts the container, and the Events
  written while it was down are published, none twice;
- the leader's Pod deleted: it drains within its grace period (exit 0, ``stopped`` with
  ``drained`` and ``lease_released`` in its log), a standby takes the Lease, nothing lost.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from tests.cloudevent_expected import expected_attributes
from tests.node.workloads import (
    BRIDGE,
    NAMESPACE,
    TOKEN_VOLUME,
    UNSCHEDULABLE,
    ClusterEvents,
    Deployed,
    LogFollower,
    PodWatch,
    container_status,
    eventually_sync,
    http_get,
    jwt_claims,
    lease,
    log_lines,
    ready,
    timestamp,
)

pytest_plugins = ["tests.node.installs"]

UID = 65532
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def role(pod: dict[str, Any]) -> str:
    status, body = http_get(pod, "/status")
    assert status == 200, body
    return str(json.loads(body)["role"])


def make_events(node: Any, name: str) -> None:
    """A Pod of the image that runs and exits: the scheduler and the kubelet write its
    ``Scheduled``, ``Pulled``, ``Created``, ``Started`` Events."""
    node.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "labels": {"app.kubernetes.io/part-of": "node-tier-events"},
            },
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "securityContext": {"runAsNonRoot": True, "runAsUser": UID},
                "containers": [
                    {
                        "name": "once",
                        "image": node.image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["python", "-c", "print('an Event or four')"],
                    }
                ],
            },
        }
    )


def started_events(node: Any, pod: str) -> list[dict[str, Any]]:
    return [e for e in node.events("default", pod) if e["reason"] == "Started"]


# ----------------------------------------------------------------------------- the tests


def test_both_replicas_get_ready_through_their_probes_one_leading(deployed: Deployed) -> None:
    pods = deployed.both_ready()
    for p in pods:
        (c,) = p["spec"]["containers"]
        # the probes as shipped, on the port as shipped
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container_status(p, "bridge")["ready"] is True
        assert http_get(p, "/readyz")[0] == 200
        assert c["image"] == deployed.node.image
    holder = deployed.holder()
    roles = {p["metadata"]["name"]: role(p) for p in pods}
    assert roles[holder] == "leader", roles
    assert sorted(roles.values()) == ["leader", "standby"], roles


def test_the_warnings_the_cluster_writes_are_in_the_stream_each_once(
    deployed: Deployed, cluster_events: ClusterEvents
) -> None:
    """Written by the cluster itself: the scheduler about a Pod no node matches, the kubelet
    about a container of the image that exits at once; compared with what the API server had
    (every version since the leader was ready) and holds (every Event now)."""
    truth = deployed.truth

    def written() -> bool:
        scheduled = [
            e for e in truth.of("FailedScheduling", "default")
            if e["involvedObject"].get("name", "") == UNSCHEDULABLE
        ]  # fmt: skip
        backoff = [
            e for e in truth.of("BackOff", "default")
            if e["involvedObject"].get("name", "").startswith("crash-loop-")
        ]  # fmt: skip
        return bool(scheduled and backoff)

    eventually_sync(written, 180, 1, what="FailedScheduling and BackOff written by the cluster")
    kept = deployed.carried()
    for reason, component in (("FailedScheduling", "default-scheduler"), ("BackOff", "kubelet")):
        versions = [e for e in kept.values() if e["reason"] == reason]
        assert versions, reason
        for ev in versions:
            writer = ev.get("reportingComponent") or ev.get("source", {}).get("component")
            assert writer == component, (reason, writer)
    # the subject and attributes docs/design.md promises, for what the bridge sent
    msgs = deployed.nats.messages(f"k8s.events.{deployed.cluster}.default.Pod.BackOff")
    assert msgs
    want = {f"{e['metadata']['uid']}/{e['metadata']['resourceVersion']}": e for e in kept.values()}
    for subject, headers, _ in msgs:
        ev = want.get(headers["Nats-Msg-Id"])
        if ev is not None:
            expected = expected_attributes(ev, cluster=deployed.cluster)
            assert subject == expected["nats-subject"]


def _proc_status(pid: int) -> dict[str, str]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def _mounts(pid: int) -> dict[str, tuple[set[str], str]]:
    """Mount point -> (its per-mount options, its filesystem type), as the container sees them."""
    out = {}
    with open(f"/proc/{pid}/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            out[fields[4]] = (set(fields[5].split(",")), right.split()[0])
    return out


def test_the_bridge_keeps_its_read_only_root_its_user_and_no_privilege(
    deployed: Deployed,
) -> None:
    """Read from the host, in /proc of the container's main process (the kubelet's and the
    runtime's word is not taken): what the manifest asks is what the kernel enforces."""
    for p in deployed.both_ready():
        name = p["metadata"]["name"]
        pid = deployed.node.container_pid(NAMESPACE, name, "bridge")
        status = _proc_status(pid)
        assert status["Uid"].split() == [str(UID)] * 4, (name, status["Uid"])
        assert status["Gid"].split() == [str(UID)] * 4, (name, status["Gid"])
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0, name
        assert int(status["CapBnd"], 16) == 0, (name, status["CapBnd"])
        assert status["NoNewPrivs"] == "1", name
        assert status["Seccomp"] == "2", name  # a filter: RuntimeDefault
        mounts = _mounts(pid)
        assert "ro" in mounts["/"][0], (name, mounts["/"])
        assert "rw" in mounts["/tmp"][0], (name, mounts["/tmp"])
        assert "ro" in mounts["/etc/k8s-event-bridge"][0], name
        # the runtime resolves the path in the image: /var/run is a link to /run in Debian's
        (token_mount,) = [m for m in mounts if m.endswith(SA_MOUNT.removeprefix("/var"))]
        assert "ro" in mounts[token_mount][0], name
        # the token the kubelet projected for this Pod: 10 minutes, its service account
        token = (deployed.node.pod_volume_path(NAMESPACE, name, TOKEN_VOLUME) / "token").read_text()
        claims = jwt_claims(token)
        assert claims["exp"] - claims["iat"] == 600, claims
        assert claims["sub"] == f"system:serviceaccount:{NAMESPACE}:{BRIDGE}"
        assert claims["kubernetes.io"]["pod"]["name"] == name
        assert not [v for v in p["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]


def test_a_sigkill_of_the_leader_is_restarted_by_the_kubelet_and_nothing_is_lost(
    deployed: Deployed,
) -> None:
    node = deployed.node
    deployed.both_ready()
    leader = deployed.holder()
    restarts = container_status(node.pod(NAMESPACE, leader), "bridge")["restartCount"]
    pid = node.container_pid(NAMESPACE, leader, "bridge")
    os.kill(pid, signal.SIGKILL)
    # what the cluster writes while no bridge has read it: a Pod's four Events
    make_events(node, "while-killed")

    def restarted() -> dict[str, Any] | None:
        pod = node.pod(NAMESPACE, leader)
        s = container_status(pod, "bridge")
        return pod if s["restartCount"] == restarts + 1 and ready(pod) else None

    pod = eventually_sync(restarted, 120, 1, what=f"{leader} restarted by the kubelet and Ready")
    last = container_status(pod, "bridge")["lastState"]["terminated"]
    assert last["exitCode"] == 128 + signal.SIGKILL, last
    eventually_sync(lambda: started_events(node, "while-killed"), 60, 1, what="its Events")
    kept = deployed.carried()
    assert [e for e in kept.values() if e["involvedObject"].get("name", "") == "while-killed"]
    assert deployed.holder() in {p["metadata"]["name"] for p in deployed.both_ready()}
    node.kubectl("-n", "default", "delete", "pod", "while-killed", "--wait=false")


def test_the_leaders_pod_deleted_drains_in_its_grace_period_and_the_standby_takes_over(
    deployed: Deployed,
) -> None:
    node = deployed.node
    pods = deployed.both_ready()
    leader = deployed.holder()
    before = lease(node, NAMESPACE, BRIDGE)
    changes = len(deployed.nats.status_events(deployed.cluster, "leader_changed"))
    stops = len(deployed.nats.status_events(deployed.cluster, "stopped"))
    grace = next(p for p in pods if p["metadata"]["name"] == leader)["spec"][
        "terminationGracePeriodSeconds"
    ]
    with (
        PodWatch(deployed.api, NAMESPACE, leader) as watch,
        LogFollower(node, NAMESPACE, leader, "bridge") as follower,
    ):
        node.kubectl("-n", NAMESPACE, "delete", "pod", leader, "--wait=false")
        make_events(node, "while-handing-over")
        log = log_lines(follower.output(timeout=grace + 30))
        gone = eventually_sync(watch.deleted, grace + 60, 0.5, what=f"{leader} gone")
    terminated = container_status(gone, "bridge")["state"]["terminated"]
    assert terminated["exitCode"] == 0, terminated
    # within the grace period: the container finished before the kubelet would have sent
    # SIGKILL. The Pod as the deletion first marked it has deletionTimestamp = the deletion's
    # time + the grace period (the kubelet's own final delete, grace 0, moves it back).
    marked = next(o for _, o in watch.seen if o["metadata"].get("deletionTimestamp"))
    assert marked["metadata"]["deletionGracePeriodSeconds"] == grace
    assert timestamp(terminated["finishedAt"]) <= timestamp(marked["metadata"]["deletionTimestamp"])
    events = [(line.get("event"), line) for line in log]
    stop = [line for e, line in events if e == "stop_requested"]
    assert stop and stop[0]["signal"] == "SIGTERM", events[-10:]
    stopped = [line for e, line in events if e == "stopped"]
    assert stopped and stopped[0]["drained"] is True, events[-10:]
    assert "lease_released" in [e for e, _ in events], events[-10:]

    # a standby takes it: the one that stood by, or the Deployment's new Pod, which stands by
    # as soon as it has checked NATS (both try every retry_period; either may come first)
    def taken() -> dict[str, Any] | None:
        spec = lease(node, NAMESPACE, BRIDGE)
        return spec if spec.get("holderIdentity") not in (None, "", leader) else None

    after = eventually_sync(taken, 60, 0.5, what="a standby holds the Lease")
    standby = after["holderIdentity"]
    assert standby in {p["metadata"]["name"] for p in deployed.pods()}
    assert after["leaseTransitions"] == before["leaseTransitions"] + 1
    # the new leader's leader_changed (the Lease was released: no previous holder), after the
    # old leader's stopped, in the stream
    changed = eventually_sync(
        lambda: deployed.nats.status_events(deployed.cluster, "leader_changed")[changes:],
        60, 1, what="the new leader's leader_changed",
    )  # fmt: skip
    assert [c["identity"] for c in changed] == [standby], changed
    assert not changed[0]["previousHolder"], changed
    assert len(deployed.nats.status_events(deployed.cluster, "stopped")) == stops + 1
    eventually_sync(lambda: started_events(node, "while-handing-over"), 60, 1, what="its Events")
    deployed.carried()
    pods = deployed.both_ready()  # the Deployment's new Pod, standing by
    assert leader not in {p["metadata"]["name"] for p in pods}
    assert {role(p) for p in pods} == {"leader", "standby"}
    node.kubectl("-n", "default", "delete", "pod", "while-handing-over", "--wait=false")
