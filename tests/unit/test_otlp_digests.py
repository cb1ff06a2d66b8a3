"""The OTLP subscriber's record of a digest (``mapping.digest``): one record per series per
window, its occurrences as ``k8s.event.count``, the series judged by the tenant's rule, every
value bounded; and a refused one's dead letter."""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import SeverityNumber

from k8s_event_common import digests
from k8s_event_consumer.consuming import Delivery
from k8s_event_consumer.events import decode
from k8s_event_consumer.otlp import mapping, settings
from k8s_event_consumer.otlp.__main__ import main
from k8s_event_consumer.otlp.shipping import DeadLetters

CLUSTER = "prod-eu-1"
START = datetime(2026, 12, 4, 10, 0, 0, tzinfo=UTC)
END = START + timedelta(minutes=5)
STORED = END + timedelta(seconds=2)


def series(**kw: Any) -> digests.Series:
    base: dict[str, Any] = {
        "cluster": CLUSTER,
        "namespace": "shop",
        "kind": "Pod",
        "name": "web-1",
        "uid": "pod-uid-1",
        "reason": "BackOff",
        "type": "Warning",
        "reporting_component": "kubelet",
    }
    return digests.Series(**{**base, **kw})


def digest(s: digests.Series | None = None, **kw: Any) -> digests.Digest:
    base: dict[str, Any] = {
        "series": s or series(),
        "start": START,
        "end": END,
        "occurrences": 57,
        "versions": 41,
        "first_seen": START + timedelta(seconds=3),
        "last_seen": START + timedelta(seconds=290),
        "count_from": 12,
        "count_to": 69,
        "uids": ("ev-1", "ev-2"),
        "uids_omitted": 0,
        "first_message": "Back-off restarting failed container app",
        "last_message": "Back-off restarting failed container app in pod web-1",
        "sampled": True,
        "combined": False,
        "stream": "K8S_EVENTS",
        "first_seq": 1001,
        "last_seq": 1977,
    }
    return digests.Digest(**{**base, **kw})


def delivery(dg: digests.Digest, seq: int = 5, ascii_json: bool = False) -> Delivery:
    """``dg`` as the digest program publishes it and the consumer decodes it; ``ascii_json``:
    written with every non-ASCII character escaped, as a forger can (a lone surrogate too)."""
    headers = digests.headers(dg)
    if ascii_json:
        body = json.dumps(digests.document(dg), separators=(",", ":")).encode()
    else:
        body = digests.encode(dg)
    decoded = decode(digests.subject("k8s.digests", dg.series), headers, body)
    assert decoded.digest is not None
    return Delivery(decoded, seq, 1, STORED, headers, body)


def attrs(kvs: Any) -> dict[str, Any]:
    out = {}
    for kv in kvs:
        v: AnyValue = kv.value
        which = v.WhichOneof("value")
        if which == "array_value":
            out[kv.key] = [x.string_value for x in v.array_value.values]
        else:
            out[kv.key] = getattr(v, str(which))
    return out


def nanos(t: datetime) -> int:
    return int(t.timestamp()) * 1_000_000_000


def test_a_digest_is_one_record_with_its_occurrences_as_the_count() -> None:
    dg = digest()
    m = mapping.mapped(delivery(dg))
    assert m.id == dg.id
    assert m.resource == (
        ("k8s.cluster.name", CLUSTER),
        ("k8s.namespace.name", "shop"),
        ("k8s.object.kind", "Pod"),
        ("k8s.object.name", "web-1"),
        ("k8s.object.uid", "pod-uid-1"),
        ("k8s.pod.name", "web-1"),
        ("k8s.pod.uid", "pod-uid-1"),
    )
    r = m.record
    assert r.time_unix_nano == nanos(END)  # the window's end
    assert r.observed_time_unix_nano == nanos(STORED)
    assert r.severity_number == SeverityNumber.SEVERITY_NUMBER_WARN
    assert r.severity_text == "Warning"
    assert r.event_name == "io.k8s.digest"
    assert r.body.string_value == digests.line(dg)
    assert r.body.string_value.startswith(
        "2026-12-04T10:00:00Z +5m0s BackOff Pod shop/web-1: 57 times in 41 versions"
    )
    assert attrs(r.attributes) == {
        "k8s.event.reason": "BackOff",
        "k8s.namespace.name": "shop",
        "k8s.event.count": 57,
        "k8s.event.type": "Warning",
        "k8s.event.reporting_component": "kubelet",
        "cloudevents.event_id": dg.id,
        "cloudevents.event_source": f"k8s://{CLUSTER}/namespaces/shop",
        "cloudevents.event_type": "io.k8s.digest",
        "cloudevents.event_spec_version": "1.0",
        "cloudevents.event_subject": "Pod/web-1",
        "k8s_event_bridge.stream_sequence": 5,
        "k8s_event_bridge.digest.window_start": "2026-12-04T10:00:00Z",
        "k8s_event_bridge.digest.window_end": "2026-12-04T10:05:00Z",
        "k8s_event_bridge.digest.window_seconds": 300.0,
        "k8s_event_bridge.digest.versions": 41,
        "k8s_event_bridge.digest.count_from": 12,
        "k8s_event_bridge.digest.count_to": 69,
        "k8s_event_bridge.digest.first_seen": "2026-12-04T10:00:03Z",
        "k8s_event_bridge.digest.last_seen": "2026-12-04T10:04:50Z",
        "k8s_event_bridge.digest.sampled": True,
        "k8s_event_bridge.digest.combined": False,
        "k8s_event_bridge.digest.first_message": "Back-off restarting failed container app",
        "k8s_event_bridge.digest.last_message": (
            "Back-off restarting failed container app in pod web-1"
        ),
        "k8s_event_bridge.digest.stream": "K8S_EVENTS",
        "k8s_event_bridge.digest.first_sequence": 1001,
        "k8s_event_bridge.digest.last_sequence": 1977,
        "k8s_event_bridge.digest.events": ["ev-1", "ev-2"],
    }


def test_a_normal_series_is_info_and_a_quiet_one_still_says_zero() -> None:
    dg = digest(
        series(type="Normal", reason="Pulled"),
        occurrences=0,
        uids=(),
        uids_omitted=0,
        first_seen=None,
        last_seen=None,
        sampled=False,
    )
    r = mapping.mapped(delivery(dg)).record
    assert r.severity_number == SeverityNumber.SEVERITY_NUMBER_INFO
    assert r.severity_text == "Normal"
    a = attrs(r.attributes)
    assert a["k8s.event.count"] == 0  # a count, said even when nothing advanced
    for absent in ("first_seen", "last_seen", "events", "events_omitted"):
        assert f"k8s_event_bridge.digest.{absent}" not in a


def test_uids_past_the_digests_cap_are_counted() -> None:
    uids = tuple(f"ev-{i}" for i in range(digests.MAX_UIDS))
    a = attrs(mapping.mapped(delivery(digest(uids=uids, uids_omitted=9))).record.attributes)
    assert a["k8s_event_bridge.digest.events"] == list(uids)
    assert a["k8s_event_bridge.digest.events_omitted"] == 9


def test_an_untrusted_series_names_no_object() -> None:
    dg = digest(series(name="", uid="", untrusted=True))
    m = mapping.mapped(delivery(dg))
    assert m.resource == (
        ("k8s.cluster.name", CLUSTER),
        ("k8s.namespace.name", "shop"),
        ("k8s.object.kind", "Pod"),
    )
    a = attrs(m.record.attributes)
    assert a["k8s_event_bridge.untrusted"] == ["object:untrusted"]
    assert "cloudevents.event_subject" not in a
    assert "Pod in shop (untrusted)" in m.record.body.string_value


def test_a_series_marked_untrusted_that_still_names_one_is_not_believed() -> None:
    # a writer's slip (or a forged digest): the mark wins, nothing of the name goes out
    dg = digest(series(name="db-0", uid="other-uid", untrusted=True))
    m = mapping.mapped(delivery(dg))
    assert m.id == dg.id
    sent = m.record.SerializeToString() + repr(m.resource).encode()
    assert b"db-0" not in sent and b"other-uid" not in sent


@pytest.mark.parametrize(
    ("namespace", "kind", "trusted", "object_namespace"),
    [
        ("default", "Node", True, ""),  # Kubernetes' own Node Events: cluster-scoped
        ("kube-system", "node", True, ""),
        ("shop", "Node", False, "shop"),  # any tenant may name any Node
        ("shop", "Namespace", False, "shop"),  # another Namespace object
    ],
)
def test_a_cluster_scoped_series_is_judged_by_the_rule_whatever_the_writer_said(
    namespace: str, kind: str, trusted: bool, object_namespace: str
) -> None:
    dg = digest(series(namespace=namespace, kind=kind, name="node-1", uid="n-uid"))
    m = mapping.mapped(delivery(dg))
    res = dict(m.resource)
    a = attrs(m.record.attributes)
    assert res.get("k8s.namespace.name", "") == object_namespace
    assert a.get("k8s.namespace.name", "") == object_namespace
    if trusted:
        assert res["k8s.object.name"] == "node-1" and res["k8s.node.name"] == "node-1"
        assert res["k8s.node.uid"] == "n-uid"
        assert "k8s_event_bridge.untrusted" not in a
    else:
        assert b"node-1" not in m.record.SerializeToString()
        assert not any(v in ("node-1", "n-uid") for _, v in m.resource)
        assert a["k8s_event_bridge.untrusted"] == ["object:cluster_scoped"]


def test_every_value_is_bounded_and_writable() -> None:
    big = "x" * digests.MAX_TEXT
    dg = digest(
        series(kind=big, reason=big, name=big, reporting_component=big),
        first_message="\ud800" + "m" * (digests.MAX_MESSAGE - 1),
        last_message="l" * digests.MAX_MESSAGE,
        occurrences=digests.MAX_NUMBER,
        count_to=digests.MAX_NUMBER,
        uids=tuple(big for _ in range(digests.MAX_UIDS)),
    )
    m = mapping.mapped(delivery(dg, ascii_json=True))
    body = mapping.request([m]).SerializeToString()  # no lone surrogate gets this far
    a = attrs(m.record.attributes)
    assert a["k8s.event.count"] == digests.MAX_NUMBER
    assert a["k8s_event_bridge.digest.first_message"][0] == "?"  # the lone surrogate, replaced
    # no attribute is named by the message: an odd kind has no k8s.<kind>.* of its own
    assert all(not k.startswith(f"k8s.{big}") for k, _ in m.resource)
    # what the decoder's bounds allow, at most: ~ the texts above and a line made of them
    assert len(body) < 64 * 1024
    assert len(m.record.body.string_value) < 5 * digests.MAX_TEXT + 512


def test_resource_attributes_of_the_config_win_and_each_key_is_once() -> None:
    m = mapping.mapped(delivery(digest()), (("k8s.cluster.name", "eu"), ("k8s.cluster.uid", "c")))
    keys = [k for k, _ in m.resource]
    assert len(keys) == len(set(keys))
    assert dict(m.resource)["k8s.cluster.name"] == "eu"


def test_records_of_one_series_share_a_resource_in_a_request() -> None:
    one = digest()
    two = dataclasses.replace(one, start=END, end=END + timedelta(minutes=5), occurrences=3)
    req = mapping.request([mapping.mapped(delivery(one)), mapping.mapped(delivery(two, 6))])
    assert len(req.resource_logs) == 1
    counts = [
        attrs(r.attributes)["k8s.event.count"]
        for r in req.resource_logs[0].scope_logs[0].log_records
    ]
    assert counts == [57, 3]


def test_a_refused_digests_dead_letter_is_the_digest_itself() -> None:
    dg = digest()
    d = delivery(dg, seq=77)
    body, headers = DeadLetters(None, "k8s.dead.otlp", "http://e/v1/logs").message(d, 400, "no")
    assert body == digests.encode(dg)
    assert headers["Content-Type"].startswith("application/cloudevents+json")
    assert headers["K8s-Event-Stream-Sequence"] == "77"  # in the digests stream
    assert headers["Nats-Msg-Id"].startswith(f"{dg.id}:")


@pytest.mark.parametrize("reads", ["events", "digests"])
def test_a_dead_letter_subject_under_the_digests_is_a_config_error(
    tmp_path: Path, reads: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "otlp.yaml"
    path.write_text(f"nats:\n  reads: {reads}\ndead_letter:\n  subject: k8s.digests.dead\n")
    with pytest.raises(settings.ConfigError, match=r"digests stream's \(under 'k8s\.digests'\)"):
        settings.load(str(path))
    assert main(["check-config", "--config", str(path)]) == 2
    assert "dead_letter.subject" in capsys.readouterr().err


def test_reading_digests_reads_the_digests_stream_with_the_shipped_dead_letters(
    tmp_path: Path,
) -> None:
    path = tmp_path / "otlp.yaml"
    path.write_text("nats:\n  reads: digests\n  durable: k8s-event-otlp-digests\n")
    s = settings.load(str(path))
    assert s.nats.read_stream == "K8S_DIGESTS"
    assert s.nats.filters == ["k8s.digests.>"]
    assert (s.dead_letter.stream, s.dead_letter.subject) == ("K8S_EVENTS_DEAD", "k8s.dead.otlp")


# --- the example manifest (deploy/consumers/otlp-digests.yaml) ---------------------------------

ROOT = Path(__file__).resolve().parents[2]


def manifest(name: str) -> dict[str, dict[str, Any]]:
    return {
        d["kind"]: d for d in yaml.safe_load_all((ROOT / "deploy/consumers" / name).read_text())
    }


def manifest_settings(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    for var in [v for v in os.environ if v.startswith("OTLP_")]:
        monkeypatch.delenv(var)
    f = tmp_path / name
    f.write_text(manifest(name)["ConfigMap"]["data"]["otlp.yaml"])
    return settings.load(str(f))


def test_the_digests_manifest_reads_digests_with_a_durable_of_its_own_beside_otlp_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dig = manifest_settings("otlp-digests.yaml", tmp_path, monkeypatch)
    ev = manifest_settings("otlp.yaml", tmp_path, monkeypatch)
    assert (dig.nats.reads, dig.nats.read_stream) == ("digests", "K8S_DIGESTS")
    assert dig.nats.filters == ["k8s.digests.>"]
    assert dig.nats.durable == "k8s-event-otlp-digests" != ev.nats.durable
    # beside it: the one NATS user and Secret, and the dead-letter stream in one shape
    assert dig.nats.user == ev.nats.user
    assert dig.dead_letter == ev.dead_letter
    assert dig.nats.inbox_prefix == ev.nats.inbox_prefix


def test_the_digests_manifest_takes_nothing_of_otlp_yamls_objects() -> None:
    dig, ev = manifest("otlp-digests.yaml"), manifest("otlp.yaml")
    assert sorted(dig) == sorted(ev)
    for kind in dig:
        assert dig[kind]["metadata"]["name"] != ev[kind]["metadata"]["name"]
    ev_labels = ev["Deployment"]["spec"]["template"]["metadata"]["labels"]
    for selector in (
        dig["Deployment"]["spec"]["selector"]["matchLabels"],
        dig["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
    ):
        assert not selector.items() <= ev_labels.items()  # never selects otlp.yaml's Pods
    pod = dig["Deployment"]["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "config"]
    assert c["args"] == ["run", "--config", f"{mount['mountPath']}/otlp.yaml"]
    assert pod["automountServiceAccountToken"] is False
    assert dig["ServiceAccount"]["automountServiceAccountToken"] is False
    secrets = {e["valueFrom"]["secretKeyRef"]["name"] for e in c["env"] if "valueFrom" in e
               and "secretKeyRef" in e["valueFrom"]}  # fmt: skip
    assert secrets == {"k8s-event-otlp"}  # otlp.yaml's
