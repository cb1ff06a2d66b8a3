"""The node harness itself (tests/standins/node.py): a Pod from the application image runs on the
real kubelet as the image's user with a read-only root, the projected service-account token and
``kube-root-ca.crt`` in place, reaches the API server through the ``kubernetes`` Service and the
host's nats-server; a container killed from the host with a real SIGKILL is restarted by the
kubelet."""

from __future__ import annotations

import base64
import json
import os
import signal
from typing import Any

from k8s_event_sim.natsserver import NatsServer
from tests.standins.node import Node

TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# What the check Pod's container reports about itself, as one JSON line.
CHECK = r"""
import json, os, socket, ssl, urllib.request
d = "/var/run/secrets/kubernetes.io/serviceaccount"
out = {"uid": os.getuid(), "gid": os.getgid(), "files": sorted(os.listdir(d))}
out["token"] = open(d + "/token").read()
out["ca"] = open(d + "/ca.crt").read()
out["namespace"] = open(d + "/namespace").read()
try:
    open("/written-by-the-pod", "w")
    out["root_write"] = "allowed"
except OSError as e:
    out["root_write"] = e.strerror
# the API server through the kubernetes Service (kube-proxy), as the Pod's ServiceAccount
url = "https://%s:%s/apis/authentication.k8s.io/v1/selfsubjectreviews" % (
    os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])
req = urllib.request.Request(url, method="POST", data=json.dumps(
    {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode(),
    headers={"Authorization": "Bearer " + out["token"], "Content-Type": "application/json"})
ctx = ssl.create_default_context(cafile=d + "/ca.crt")
with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
    out["whoami"] = json.loads(r.read())["status"]["userInfo"]["username"]
# the host's nats-server: its first line is INFO
host, port = os.environ["NATS_HOST"], int(os.environ["NATS_PORT"])
with socket.create_connection((host, port), timeout=10) as s:
    out["nats"] = s.recv(4096).decode().split(" ", 1)[0]
print(json.dumps(out))
"""

SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def pod(name: str, namespace: str, image: str, container: dict[str, Any], **spec: Any) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "securityContext": SECURITY,
                    **container,
                }
            ],
            **spec,
        },
    }


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))  # type: ignore[no-any-return]


def test_a_pod_from_the_image_runs_as_its_user_read_only_with_token_and_ca(
    node: Node, nats: NatsServer, namespace: str
) -> None:
    env = [
        {"name": "NATS_HOST", "value": nats.host},
        {"name": "NATS_PORT", "value": str(nats.port)},
    ]
    node.apply(
        pod(
            "check",
            namespace,
            node.image,
            {"command": ["python", "-c", CHECK], "env": env},
            restartPolicy="Never",
        )
    )
    done = node.wait_pod(namespace, "check", "Succeeded")

    report = json.loads(node.pod_logs(namespace, "check").strip().splitlines()[-1])
    assert (report["uid"], report["gid"]) == (65532, 65532)  # the image's USER, no runAsUser
    assert report["root_write"] == "Read-only file system"
    assert {"token", "ca.crt", "namespace"} <= set(report["files"])
    assert report["namespace"] == namespace
    assert report["ca"] == node.certs.ca_cert.read_text()  # kube-root-ca.crt, published
    token = claims(report["token"])
    assert token["sub"] == f"system:serviceaccount:{namespace}:default"
    assert token["kubernetes.io"]["pod"]["name"] == "check"  # bound to this Pod
    assert report["whoami"] == token["sub"]
    assert report["nats"] == "INFO"
    status = done["status"]["containerStatuses"][0]
    assert status["state"]["terminated"]["exitCode"] == 0


def test_a_container_killed_from_the_host_is_restarted_by_the_kubelet(
    node: Node, namespace: str
) -> None:
    node.apply(
        pod(
            "sleeper",
            namespace,
            node.image,
            {"command": ["python", "-c", "import signal; print('up', flush=True); signal.pause()"]},
            terminationGracePeriodSeconds=1,  # PID 1 ignores SIGTERM: no 30 s wait at the end
        )
    )
    node.wait_pod(namespace, "sleeper")
    pid = node.container_pid(namespace, "sleeper", "main")
    with open(f"/proc/{pid}/status") as f:
        uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
    assert uids[0] == "65532"  # the host's view of the container's main process
    # the same process seen from inside (its PID 1, through kubectl exec) and from the host
    script = "print(open('/proc/1/cmdline').read().replace(chr(0), ' '))"
    inside = node.exec(namespace, "sleeper", "python", "-c", script).strip()
    with open(f"/proc/{pid}/cmdline") as f:
        assert inside == f.read().replace("\0", " ").strip()
    assert node.restart_count(namespace, "sleeper", "main") == 0

    os.kill(pid, signal.SIGKILL)

    node.wait_for(
        lambda: node.restart_count(namespace, "sleeper", "main") == 1,
        "the kubelet restarting the killed container",
    )
    node.wait_pod(namespace, "sleeper")
    last = node.pod(namespace, "sleeper")["status"]["containerStatuses"][0]["lastState"]
    assert last["terminated"]["exitCode"] == 137  # 128 + SIGKILL
    assert node.container_pid(namespace, "sleeper", "main") != pid
    assert node.pod_logs(namespace, "sleeper", previous=True).strip() == "up"
