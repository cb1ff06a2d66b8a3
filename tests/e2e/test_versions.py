"""What the bridge relies on, or could be tempted to, checked on each Kubernetes version of the
tier, with what differs between the oldest (1.32) and the newest (1.37) named.

Measured on v1.32.9 and v1.37.2 (the e2e tier runs on both, the living cluster on the newest; these
tests pin the points):

* **Field selectors on Events**: the same on both. Every form the bridge pushes to the server
  (``server_field_selector``: ``reason=``, ``reason!=``, ``type=``, ``involvedObject.kind=``,
  ``metadata.namespace=`` / ``!=``) works in a list and in a watch; ``series.count`` is not a
  field label on either (400), so a series can never be selected server-side.
* **Bookmarks**: none on an Events watch on either (no watch cache for Events by default;
  test_control_plane_smoke.py), except the ``k8s.io/initial-events-end`` bookmark after the
  initial events of a ``resourceVersion=0`` or ``sendInitialEvents=true`` watch.
* **Watch-list** (``sendInitialEvents=true&resourceVersionMatch=NotOlderThan``): served on both
  for Events (straight from etcd). 1.32's initial-events-end bookmark also carries
  ``kubernetes.io/initial-events-list-blueprint`` (the empty list client-go's watch-list client
  decodes into); 1.37's does not. The bridge does not use watch-list: it lists in pages and
  watches from the list's resourceVersion, which both serve alike.
* **Who writes which API**: the scheduler writes ``events.k8s.io/v1`` (series) on both; the
  controllers and kwok's kubelets write core/v1 through the correlator on both
  (test_living_cluster.py).
* Starting kube-apiserver: 1.37 refuses the loopback advertise address for the ``kubernetes``
  Service's endpoints unless ``--endpoint-reconciler-type=none`` (controlplane.py sets it for
  both); nothing the bridge sees.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest

from tests.standins.controlplane import ControlPlane, minor

pytestmark = pytest.mark.e2e

NS, OTHER = "versions", "versions-other"
# does the initial-events-end bookmark carry kubernetes.io/initial-events-list-blueprint?
BLUEPRINT = {32: True, 37: False}


def _ensure(cp: ControlPlane) -> None:
    for ns in (NS, OTHER):
        cp.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
        for name, reason, type_, kind in (
            ("backoff", "BackOff", "Warning", "Pod"),
            ("scheduled", "Scheduled", "Normal", "Pod"),
            ("scaled", "ScalingReplicaSet", "Normal", "Deployment"),
        ):
            cp.request(
                "POST",
                f"/api/v1/namespaces/{ns}/events",
                {
                    "metadata": {"name": name, "namespace": ns},
                    "involvedObject": {"kind": kind, "name": "x", "namespace": ns},
                    "reason": reason,
                    "type": type_,
                    "message": "m",
                    "source": {"component": "e2e"},
                    "count": 1,
                },
            )


def _names(cp: ControlPlane, selector: str) -> list[str]:
    status, body = cp.request("GET", f"/api/v1/events?fieldSelector={quote(selector)}")
    assert status == 200, body
    return sorted(
        f"{i['metadata']['namespace']}/{i['metadata']['name']}"
        for i in json.loads(body)["items"]
        if i["metadata"]["namespace"] in (NS, OTHER)
    )


@pytest.mark.parametrize(
    ("selector", "want"),
    [
        ("reason=BackOff", [f"{NS}/backoff", f"{OTHER}/backoff"]),
        ("type=Warning", [f"{NS}/backoff", f"{OTHER}/backoff"]),
        ("involvedObject.kind=Deployment", [f"{NS}/scaled", f"{OTHER}/scaled"]),
        (f"metadata.namespace={NS},reason!=BackOff", [f"{NS}/scaled", f"{NS}/scheduled"]),
        (
            f"metadata.namespace!={OTHER},type=Normal,reason!=Scheduled",
            [f"{NS}/scaled"],
        ),
    ],
)
def test_the_field_selectors_the_bridge_pushes_filter_alike(
    control_plane: ControlPlane, selector: str, want: list[str]
) -> None:
    _ensure(control_plane)
    assert _names(control_plane, selector) == sorted(want)


def test_series_count_is_no_field_label(control_plane: ControlPlane) -> None:
    status, body = control_plane.request("GET", "/api/v1/events?fieldSelector=series.count%3D2")
    assert status == 400
    assert b"field label not supported: series.count" in body


def test_a_watch_with_a_field_selector_sees_only_what_it_selects(
    control_plane: ControlPlane,
) -> None:
    _ensure(control_plane)
    status, body = control_plane.request(
        "GET",
        f"/api/v1/namespaces/{NS}/events?watch=1&resourceVersion=0&timeoutSeconds=2"
        f"&fieldSelector={quote('reason=BackOff')}",
    )
    assert status == 200
    lines = [json.loads(ln) for ln in body.splitlines()]
    assert [(ln["type"], ln["object"]["metadata"]["name"]) for ln in lines] == [
        ("ADDED", "backoff")
    ]


def test_watch_list_is_served_and_its_end_bookmark_differs_by_version(
    control_plane: ControlPlane, kubernetes_version: str
) -> None:
    _ensure(control_plane)
    status, body = control_plane.request(
        "GET",
        f"/api/v1/namespaces/{NS}/events?watch=1&sendInitialEvents=true"
        "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=2",
    )
    assert status == 200, body
    lines: list[dict[str, Any]] = [json.loads(ln) for ln in body.splitlines()]
    assert {ln["object"]["metadata"]["name"] for ln in lines if ln["type"] == "ADDED"} == {
        "backoff",
        "scheduled",
        "scaled",
    }
    bookmark = lines[-1]
    assert bookmark["type"] == "BOOKMARK"
    annotations = bookmark["object"]["metadata"]["annotations"]
    assert annotations["k8s.io/initial-events-end"] == "true"
    blueprint = "kubernetes.io/initial-events-list-blueprint" in annotations
    m = minor(kubernetes_version)
    assert m in BLUEPRINT, (
        f"1.{m}: measure whether the bookmark has a blueprint, add it to BLUEPRINT"
    )
    assert blueprint == BLUEPRINT[m], annotations
