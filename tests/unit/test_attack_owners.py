"""Issue 31's owner proofs attacked again, the pure parts: what a tenant who writes a Pod (or a
Job) can make the owner walk and the memory rule believe."""

from __future__ import annotations

from typing import Any

import pytest

from k8s_event_common import owners
from k8s_event_consumer.remediation import rules
from k8s_event_consumer.remediation.kube import Invalid, Kube
from k8s_event_consumer.remediation.settings import KubernetesSettings


def _container(name: str = "app", memory: str = "256Mi", image: str = "app:1") -> dict[str, Any]:
    return {"name": name, "image": image, "resources": {"limits": {"memory": memory}}}


def _deployment(*containers: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    obj = {"spec": {"template": {"spec": {"containers": list(containers)}}}}
    return obj, "apps/v1", "Deployment"


def _pod(*containers: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"containers": list(containers)}}


def test_a_pod_that_runs_the_templates_container_is_as_the_template() -> None:
    owner = _deployment(_container(memory="0.25Gi"), _container("side", "8Mi"))
    assert rules.not_as_template(_pod(_container()), owner, ["app"]) == ""


def test_a_tenant_pod_with_its_own_limit_image_or_container_is_not() -> None:
    owner = _deployment(_container())
    cases = {
        "memory 4Mi": _pod(_container(memory="4Mi")),
        "image evil:1": _pod(_container(image="evil:1")),
        "command ['sh'": _pod({**_container(), "command": ["sh", "-c", "eat memory"]}),
        "args ['--hog']": _pod({**_container(), "args": ["--hog"]}),
        "not in the Deployment's Pod template": _pod(_container("other")),
        "memory none": _pod({"name": "app", "image": "app:1"}),
    }
    for want, p in cases.items():
        name = p["spec"]["containers"][0]["name"]
        assert want in rules.not_as_template(p, owner, [name]), want


def test_a_cronjobs_template_is_its_jobtemplates() -> None:
    obj = {
        "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [_container()]}}}}}
    }
    owner = (obj, "batch/v1", "CronJob")
    assert rules.not_as_template(_pod(_container()), owner, ["app"]) == ""
    assert rules.not_as_template(_pod(_container(memory="1Mi")), owner, ["app"])


def test_an_owner_without_a_template_claims_no_container() -> None:
    assert rules.not_as_template(_pod(_container()), ({}, "apps/v1", "Deployment"), ["app"])


def _facts(kind: str, name: str, uid: str, labels: dict[str, str], ref: owners.Ref | None,
           selector: owners.Selector | None = None) -> owners.Facts:  # fmt: skip
    return owners.Facts(kind, "ns", name, uid, labels, ref, selector)


def test_a_statefulsets_name_prefix_is_no_claim_on_another_sets_pods() -> None:
    """Sets ``web`` and ``web-1``: ``web-1-0`` is ``web-1``'s, never ``web``'s, whatever
    labels it copies."""
    sel = owners.Selector((("app", "web"),))
    web = _facts("StatefulSet", "web", "u-web", {}, None, sel)
    child = _facts(
        "Pod", "web-1-0", "p", {"app": "web"}, owners.Ref("apps/v1", "StatefulSet", "web", "u-web")
    )
    got = owners.drive(
        child, owners.CLAIMS, {owners.Want("StatefulSet", "ns", "web", "u-web"): web}
    )
    assert got.why == owners.UNCLAIMED and "ordinal" in got.detail


def test_a_uid_of_another_case_is_another_uid() -> None:
    sel = owners.Selector((("app", "web"),))
    rs = _facts("ReplicaSet", "web-1", "abc", {}, None, sel)
    child = _facts(
        "Pod", "p", "p", {"app": "web"}, owners.Ref("apps/v1", "ReplicaSet", "web-1", "ABC")
    )
    got = owners.drive(child, owners.CLAIMS, {owners.Want("ReplicaSet", "ns", "web-1", "ABC"): rs})
    assert got.why == owners.UID


def test_a_selector_of_only_notin_selects_what_it_does_not_exclude() -> None:
    """The owner's own choice (Kubernetes reads it the same way): a DoesNotExist-only selector
    selects every Pod without that key. Still, a Deployment makes no Pod."""
    sel = owners.Selector((), (owners.Requirement("tier", "DoesNotExist"),))
    dep = _facts("Deployment", "d", "u-d", {}, None, sel)
    child = _facts("Pod", "p", "p", {"any": "x"}, owners.Ref("apps/v1", "Deployment", "d", "u-d"))
    got = owners.drive(child, owners.CLAIMS, {owners.Want("Deployment", "ns", "d", "u-d"): dep})
    assert got.why == owners.UNCLAIMED


def test_a_container_named_as_another_ones_cut_key_gets_a_key_of_its_own() -> None:
    """A 63-character container's key is cut and hashed; a second container of the same
    template named exactly as that cut form (40 characters: it fits) must not get the same
    key (one suggestion would overwrite the other)."""
    base = "remediation.k8s-event-bridge.io/suggested-memory-limit"
    long = "memory-hungry-" + "x" * 48 + "1"
    cut = rules.annotation_key(base, long)
    # the cut form as a container may spell it (a DNS label: a-z 0-9 -)
    twin = cut.split("/")[1][len("suggested-memory-limit.") :].replace("_", "-")
    assert len(twin) <= 63
    assert rules.annotation_key(base, twin) != cut
    assert "_" in cut.split("/")[1]  # never in a container name (a DNS label)


async def test_the_worker_never_sends_a_request_for_an_empty_name() -> None:
    """An empty name is the collection's path: a DELETE of it would be a deletecollection."""
    sent: list[str] = []

    class Recording(Kube):
        async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
            sent.append(f"{method} {path}")
            return {}

    kube = Recording(KubernetesSettings(cluster="prod"))
    for call in (
        kube.delete_pod("shop", "", "uid", False),
        kube.get("v1", "Pod", "shop", ""),
        kube.annotate("apps/v1", "Deployment", "shop", "", "uid", {"a/b": "c"}, False),
    ):
        with pytest.raises(Invalid):
            await call
    assert sent == []
