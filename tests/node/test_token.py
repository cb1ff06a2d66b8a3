"""The short-lived service-account token, for real: the chart's release of docs/deploy.md
(tests/node/installs.py ``chart_release``, installed by the tier's first test and never
disturbed since) mounts a projected token of 600 s (the API server's minimum). The kubelet
writes a new one at 80 % of its life; the API server refuses the first once it expired. Then the
same containers, never restarted, still work: the leader renews its Lease and publishes Events
written after the expiry, with no 401 anywhere.

This file runs last in the tier (its name sorts last in tests/node), so the wait for the first
token's expiry (about ten minutes after the release's Pods started) overlaps everything else.
deploy/'s Pods carry the same volume (tests/node/test_deploy.py checks its token's life), but
they are killed and deleted on purpose there.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.node.workloads import (
    Api,
    Release,
    container_status,
    eventually_sync,
    http_get,
    jwt_claims,
    lease,
    log_lines,
    metric,
    timestamp,
)

pytest_plugins = ["tests.node.installs"]

LIFE = 600


def test_the_token_rotates_and_the_same_containers_work_after_the_first_expired(
    node: Any, chart_release: Release
) -> None:
    r = chart_release
    api = Api(node.kubeconfig)
    account = f"system:serviceaccount:{r.namespace}:{r.fullname}"
    names = sorted(r.first)
    expiry = 0
    for name in names:
        claims = jwt_claims(r.first[name]["token"])
        assert claims["exp"] - claims["iat"] == LIFE, claims
        assert r.first[name]["user"] == (201, account), r.first[name]["user"]
        expiry = max(expiry, claims["exp"])

    # the kubelet writes a new token, at 80 % of the first one's life
    def rotated() -> bool:
        return all(r.token(n) != r.first[n]["token"] for n in names)

    eventually_sync(rotated, max(60, expiry - time.time()), 2, what="the tokens rotated")
    # the API server refuses the first tokens once they expired (about 10 minutes in; it
    # takes a token up to a minute past its exp, go-jose's leeway, and caches an answer 10 s)
    eventually_sync(
        lambda: all(api.whoami(r.first[n]["token"])[0] == 401 for n in names),
        max(90, expiry - time.time() + 120), 2, what="the first tokens refused",
    )  # fmt: skip
    expired_at = time.time()
    for name in names:
        new = r.token(name)
        assert api.whoami(new) == (201, account)
        assert jwt_claims(new)["exp"] - jwt_claims(new)["iat"] == LIFE

    # the leader renews its Lease with the new token
    leader = r.holder()
    assert leader in names

    def renewed() -> bool:
        spec = lease(node, r.namespace, r.fullname)
        return spec["holderIdentity"] == leader and timestamp(spec["renewTime"]) > expired_at + 1

    eventually_sync(renewed, 60, 1, what=f"{leader} renews the Lease after the expiry")

    # ... and publishes what the cluster writes after the expiry
    pod = f"after-expiry-{int(expired_at)}"
    node.kubectl("-n", r.namespace, "run", pod, f"--image={node.image}",
                 "--image-pull-policy=IfNotPresent", "--restart=Never",
                 "--overrides", '{"spec": {"automountServiceAccountToken": false, '
                 '"securityContext": {"runAsNonRoot": true, "runAsUser": 65532}}}',
                 "--command", "--", "python", "-c", "pass")  # fmt: skip

    def published() -> bool:
        subject = f"k8s.events.{r.cluster}.{r.namespace}.Pod.Scheduled"
        return any(pod.encode() in body for _, _, body in r.nats.messages(subject))

    eventually_sync(published, 90, 1, what=f"{pod}'s Scheduled Event published")

    # the same containers since the install, never restarted, never refused
    for p in r.pods():
        name = p["metadata"]["name"]
        status = container_status(p, "bridge")
        assert name in r.first, f"{name}: a new Pod"
        assert status["containerID"] == r.first[name]["containerID"], name
        assert status["restartCount"] == 0, status
        code, text = http_get(p, "/metrics")
        assert code == 200
        assert metric(text, "k8s_event_bridge_kube_auth_failures_total", status="401") == 0
        # a refusal is logged with the status 401 or the error Unauthorized
        refused = [
            line for line in log_lines(node.pod_logs(r.namespace, name, "bridge"))
            if "Unauthorized" in json.dumps(line) or str(line.get("status")) == "401"
        ]  # fmt: skip
        assert not refused, refused[:5]
    node.kubectl("-n", r.namespace, "delete", "pod", pod, "--wait=false")
