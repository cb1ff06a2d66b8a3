"""docs/asyncapi.yaml and its JSON Schemas (docs/schemas/): well-formed, valid AsyncAPI 3.0.0,
and true of the messages the bridge writes — captured Kubernetes Events converted, and every
message of a real run (the bridge process, a real nats-server, the simulated API server)."""

from __future__ import annotations

import json
import random
import re
import signal
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urldefrag, urljoin

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator, Draft202012Validator, FormatChecker
from referencing import Registry, Resource

from bridge.core.converting import Converter
from bridge.core.enrichment import Enrichment
from k8s_event_common import cloudevents, digests, subjects
from k8s_event_sim.apiserver import SimApiServer
from k8s_event_sim.natsserver import NatsServer
from k8s_event_sim.workload import make_event
from tests.integration.harness import eventually, stream_messages

ROOT = Path(__file__).resolve().parents[2]
DOC_PATH = ROOT / "docs" / "asyncapi.yaml"
SCHEMA_DIR = ROOT / "docs" / "schemas"
OFFICIAL = ROOT / "tests" / "data" / "asyncapi" / "asyncapi-3.0.0.json"
REAL_EVENTS = sorted((ROOT / "tests" / "data" / "real-events").glob("*.jsonl"))
STATUS = (
    "started",
    "stopped",
    "gap",
    "apiserver_unreachable",
    "apiserver_reachable",
    "apiserver_degraded",
    "apiserver_recovered",
    "leader_changed",
    "dropped",
)
CONTENT_TYPES = {"structured": "application/cloudevents+json", "binary": "application/json"}
MAX_PAYLOAD = 65536  # the nats-server of the real run: an Event bigger than this is dropped

DOC: dict[str, Any] = yaml.safe_load(DOC_PATH.read_text())
SCHEMAS = {p.name: json.loads(p.read_text()) for p in sorted(SCHEMA_DIR.glob("*.json"))}
REGISTRY: Registry = Registry().with_resources(
    (p.as_uri(), Resource.from_contents(SCHEMAS[p.name])) for p in sorted(SCHEMA_DIR.glob("*.json"))
)
FORMATS = FormatChecker(formats=())
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    """RFC 3339, written out here (jsonschema checks date-time only with an extra package)."""
    if not isinstance(value, str):
        return True
    if not _RFC3339.fullmatch(value):
        return False
    datetime.fromisoformat(value[:19])  # the fields in range: no 2026-02-30
    return True


def validator(ref: str) -> Draft202012Validator:
    """A validator for a ``$ref`` as docs/asyncapi.yaml writes it, formats asserted."""
    return Draft202012Validator(
        {"$ref": urljoin(DOC_PATH.as_uri(), ref)}, registry=REGISTRY, format_checker=FORMATS
    )


def pointer(doc: Any, fragment: str) -> Any:
    for part in fragment.lstrip("/").split("/") if fragment else []:
        doc = doc[part.replace("~1", "/").replace("~0", "~")]
    return doc


def refs(node: Any) -> list[str]:
    """Every ``$ref`` in a YAML or JSON document."""
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def message(key: str) -> dict[str, Any]:
    msg: dict[str, Any] = DOC["components"]["messages"][key]
    return msg


def message_for(subject: str, content_type: str) -> str:
    """The key of the message the document gives for a subject and Content-Type."""
    if subject.startswith(f"{digests.DEFAULT_PREFIX}."):
        assert content_type.split(";")[0] == "application/cloudevents+json"
        return "digest"
    channel = "statusEvents" if "._bridge." in subject else "kubernetesEvents"
    name = subject.rsplit(".", 1)[1] if channel == "statusEvents" else "kubernetesEvent"
    keys = [ref["$ref"].rsplit("/", 1)[1] for ref in DOC["channels"][channel]["messages"].values()]
    (key,) = [
        k for k in keys if message(k)["name"] == name and message(k)["contentType"] == content_type
    ]
    return key


def problems(key: str, headers: dict[str, str], body: bytes) -> list[str]:
    """What is wrong with one NATS message for the document's message ``key``: ce-* header
    values are percent-decoded first, the body is JSON."""
    msg = message(key)
    decoded = {k: unquote(v) if k.startswith("ce-") else v for k, v in headers.items()}
    payload = json.loads(body)
    errors = [*validator(msg["headers"]["$ref"]).iter_errors(decoded)]
    errors += validator(msg["payload"]["$ref"]).iter_errors(payload)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


def token(value: str) -> str:
    """A subject token as the channel's description says it is made (short values: not cut)."""
    if not value:
        return "_"
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", value):
        return value
    kept = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-"
    return "_" + "".join(
        chr(b) if b in kept else "__" if b == ord(".") else f"_{b:02x}" for b in value.encode()
    )


def attributes(headers: dict[str, str], body: bytes) -> tuple[dict[str, Any], Any]:
    """The CloudEvent's attributes and data, whatever the mode."""
    if headers.get("Content-Type") == CONTENT_TYPES["structured"]:
        ce = json.loads(body)
        return ce, ce.pop("data")
    return {k[3:]: unquote(v) for k, v in headers.items() if k.startswith("ce-")}, json.loads(body)


def convert(mode: str, ev: dict[str, Any]) -> tuple[str, dict[str, str], bytes]:
    """(subject, headers, body) of the bridge's message for an Event, as NATS delivers it."""
    m = Converter("test", "k8s.events", mode).convert(ev)
    return m.subject, dict(m.headers or _head(m.head)), m.payload


def _head(head: bytes) -> dict[str, str]:
    lines = head.decode().split("\r\n")[1:]
    return dict(ln.split(": ", 1) for ln in lines if ln)


def status(mode: str, what: str) -> tuple[str, dict[str, str], bytes]:
    """(subject, headers, body) of the bridge's status event ``what`` of ``EXAMPLES``."""
    msg_id, data = EXAMPLES[what]
    m = Converter("test", "k8s.events", mode).status(what, msg_id, data, "2026-11-30T20:09:00Z")
    return m.subject, dict(m.headers or _head(m.head)), m.payload


# what the bridge passes to Converter.status (bridge/runtime/intake.py)
EXAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    "gap": (
        "gap/*/250-700",
        {
            "scope": "*",
            "fromResourceVersion": "250",
            "toResourceVersion": "700",
            "detectedAt": "2026-11-30T20:09:00.000001Z",
            "certainty": "likely",
            "why": "2 listed Events are newer",
            "meaning": "versions may be missing",
        },
    ),
    "apiserver_degraded": (
        "apiserver_degraded/bridge-0/*/2026-11-30T20:09:00.000001Z",
        {
            "scope": "*",
            "reason": "failures",
            "detail": "3 requests in a row failed",
            "at": "2026-11-30T20:09:00.000001Z",
        },
    ),
}


def real_events() -> list[dict[str, Any]]:
    return [json.loads(ln)["object"] for p in REAL_EVENTS for ln in p.read_text().splitlines()]


# -- the document -------------------------------------------------------------------------------


def test_the_document_is_asyncapi_3_with_its_channels_sent_by_the_bridge_and_the_digests():
    assert DOC["asyncapi"] == "3.0.0"
    # 0.2.0: the subject template, enrichment; 0.3.0: the digests
    assert DOC["info"]["version"] == "0.3.0"
    assert {s["protocol"] for s in DOC["servers"].values()} == {"nats"}
    channels = DOC["channels"]
    assert (
        channels["kubernetesEvents"]["address"] == "{prefix}.{cluster}.{namespace}.{kind}.{reason}"
    )
    assert channels["statusEvents"]["address"] == "{prefix}.{cluster}._bridge.{what}"
    # a digest's subject: digests.subject, the prefix and the series' four tokens
    assert channels["digests"]["address"] == "{digestPrefix}.{cluster}.{namespace}.{kind}.{reason}"
    assert channels["digests"]["parameters"]["digestPrefix"]["default"] == digests.DEFAULT_PREFIX
    # the Event channel's address is the prefix and the default template; its parameters are
    # the template's placeholders
    events = channels["kubernetesEvents"]
    assert events["x-subject-template"] == subjects.DEFAULT_TEMPLATE
    assert events["address"] == "{prefix}." + subjects.DEFAULT_TEMPLATE
    assert list(events["parameters"]) == subjects.placeholders(events["address"])
    assert set(events["x-template-placeholders"]) == {"type", "<extension>"}
    assert set(subjects.FIELDS) <= {*events["parameters"], *events["x-template-placeholders"]}
    assert channels["statusEvents"]["parameters"]["what"]["enum"] == list(STATUS)
    assert {op["action"] for op in DOC["operations"].values()} == {"send"}
    sent = {r["$ref"] for op in DOC["operations"].values() for r in op["messages"]}
    in_channels = {
        f"#/channels/{c}/messages/{k}" for c, ch in channels.items() for k in ch["messages"]
    }
    assert sent == in_channels


@pytest.mark.parametrize("what", ["kubernetesEvent", *STATUS])
@pytest.mark.parametrize("mode", ["structured", "binary"])
def test_every_message_exists_in_both_modes_and_requires_the_message_id_header(what, mode):
    subject = f"k8s.events.test._bridge.{what}" if what in STATUS else "k8s.events.test.a.B.C"
    msg = message(message_for(subject, CONTENT_TYPES[mode]))
    where = urljoin(DOC_PATH.as_uri(), msg["headers"]["$ref"])
    assert {"Nats-Msg-Id", "Content-Type"} <= required(REGISTRY.resolver(), where)


def required(resolver: Any, ref: str) -> set[str]:
    """The properties a schema requires, those of its ``allOf`` included."""
    found = resolver.lookup(ref)
    out = set(found.contents.get("required", []))
    for sub in found.contents.get("allOf", []):
        if "$ref" in sub:
            out |= required(found.resolver, sub["$ref"])
    return out


def test_every_ref_resolves():
    for ref in refs(DOC):
        url, fragment = urldefrag(ref)
        if not url:
            assert pointer(DOC, fragment) is not None, ref
        else:
            REGISTRY.resolver().lookup(urljoin(DOC_PATH.as_uri(), ref))
    for name, schema in SCHEMAS.items():
        resolver = REGISTRY.resolver(base_uri=(SCHEMA_DIR / name).as_uri())
        for ref in refs(schema):
            resolver.lookup(ref)  # raises when it does not resolve


@pytest.mark.parametrize("name", sorted(p.name for p in SCHEMA_DIR.glob("*.json")))
def test_every_schema_file_is_a_draft_2020_12_schema(name):
    assert SCHEMAS[name]["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(SCHEMAS[name])


def test_the_document_is_valid_against_the_official_asyncapi_3_0_0_schema():
    official = json.loads(OFFICIAL.read_text())
    assert official["properties"]["asyncapi"]["const"] == "3.0.0"
    Draft7Validator.check_schema(official)
    check = Draft7Validator(official)
    assert [e.message for e in check.iter_errors(DOC)] == []
    # and it is a real check: a 2.x-style operation is refused
    broken = {
        **DOC,
        "operations": {"x": {**DOC["operations"]["sendStatusEvent"], "action": "publish"}},
    }
    assert not check.is_valid(broken)


def test_the_examples_in_the_document_match_their_messages():
    examples = [
        (key, ex)
        for key, msg in DOC["components"]["messages"].items()
        for ex in msg.get("examples", [])
    ]
    assert {message(key)["contentType"] for key, _ in examples} == set(CONTENT_TYPES.values())
    for key, ex in examples:
        body = json.dumps(ex["payload"]).encode()
        assert problems(key, ex["headers"], body) == [], (key, ex["name"])


# -- the schemas against the bridge's own output --------------------------------------------


@pytest.mark.parametrize("mode", ["structured", "binary"])
def test_events_from_real_clusters_convert_to_messages_the_schemas_take(mode):
    """tests/data/real-events: what kube-apiserver 1.32 and 1.37 sent, managedFields and all."""
    events = real_events()
    assert len(events) >= 30 and any("managedFields" in ev["metadata"] for ev in events)
    for ev in events:
        subject, headers, body = convert(mode, ev)
        assert problems(message_for(subject, headers["Content-Type"]), headers, body) == []


@pytest.mark.parametrize("mode", ["structured", "binary"])
def test_status_events_made_by_the_converter_match_their_schemas(mode):
    for what in EXAMPLES:
        subject, headers, body = status(mode, what)
        assert problems(message_for(subject, headers["Content-Type"]), headers, body) == [], what


GONE = object()


def broken(name: str, mode: str, what: str, path: str, value: Any = GONE) -> Any:
    """A message of ``mode`` with the field at ``path`` (``headers.<name>`` or ``body.a.b``)
    set to ``value``, or removed."""
    return pytest.param(mode, what, path, value, id=name)


@pytest.mark.parametrize(
    ("mode", "what", "path", "value"),
    [  # each breaks one promise of the schemas
        broken("id missing", "structured", "event", "body.id"),
        broken("managedFields kept", "structured", "event", "body.data.metadata.managedFields", []),
        broken("k8scount a string", "structured", "event", "body.k8scount", "1"),
        broken("k8scount zero", "structured", "event", "body.k8scount", 0),
        broken("an unknown attribute", "structured", "event", "body.extra", "x"),
        broken("time not RFC 3339", "structured", "event", "body.time", "yesterday"),
        broken("time not a date", "structured", "event", "body.time", "2026-02-30T00:00:00Z"),
        broken("uid missing", "structured", "event", "body.data.metadata.uid"),
        broken("source of another shape", "structured", "event", "body.source", "k8s://x"),
        broken("Nats-Msg-Id missing", "structured", "event", "headers.Nats-Msg-Id"),
        broken("ce-id missing", "binary", "event", "headers.ce-id"),
        broken("ce-k8scount not a number", "binary", "event", "headers.ce-k8scount", "x"),
        broken("an unknown ce- header", "binary", "event", "headers.ce-extra", "x"),
        broken("managedFields in the body", "binary", "event", "body.metadata.managedFields", []),
        broken("certainty unknown", "structured", "gap", "body.data.certainty", "sure"),
        broken("a gap without its range", "binary", "gap", "body.toResourceVersion"),
        broken("a field not in the document", "binary", "gap", "body.new", 1),
        broken("another status's type", "structured", "gap", "body.type", "io.k8s.bridge.stopped"),
        broken("breaker reason unknown", "binary", "apiserver_degraded", "body.reason", "x"),
    ],
)
def test_a_broken_message_is_refused(mode, what, path, value):
    if what == "event":
        subject, headers, body = convert(mode, real_events()[0])
    else:
        subject, headers, body = status(mode, what)
    key = message_for(subject, headers["Content-Type"])
    assert problems(key, headers, body) == []
    msg = {"headers": dict(headers), "body": json.loads(body)}
    *parents, last = path.split(".")
    target = pointer(msg, "/".join(parents))
    if value is GONE:
        del target[last]
    else:
        target[last] = value
    assert problems(key, msg["headers"], json.dumps(msg["body"]).encode()) != []


# -- enrichment: the extensions by their shape, k8senriched and k8senrichmissing ------------


def with_extensions(mode: str, **attrs: Any) -> tuple[str, dict[str, str], bytes]:
    """A real Event's message with these attributes added as an enriching bridge adds them:
    structured, in the body; binary, ``ce-<name>`` headers percent-encoded. A value None takes
    the attribute out."""
    subject, headers, body = convert(mode, real_events()[0])
    if mode == "structured":
        doc = json.loads(body)
        for k, v in attrs.items():
            if v is None:
                doc.pop(k, None)
            else:
                doc[k] = v
        return subject, headers, json.dumps(doc).encode()
    for k, v in attrs.items():
        if v is None:
            headers.pop(f"ce-{k}", None)
        else:
            headers[f"ce-{k}"] = quote(str(v), safe="/:,")
    return subject, headers, body


ENRICHED_OK = {
    "complete": {"k8senriched": "complete", "team": "payments", "ownerkind": "Deployment"},
    "partial": {
        "k8senriched": "partial",
        "k8senrichmissing": "object:timeout,namespace:unknown",
        "team": "payments",
    },
    "partial, nothing found": {"k8senriched": "partial", "k8senrichmissing": "namespace:unknown"},
    "every part and why": {
        "k8senriched": "partial",
        "k8senrichmissing": ",".join(
            f"{part}:{why}"
            for part in ("namespace", "object", "owner")
            for why in (
                "timeout unreachable forbidden notfound error unknown kind invalid oversized "
                "nouid scope unproven"
            ).split()
        ),
    },
    "a hostile value is a string": {
        "k8senriched": "complete",
        "oncall": "alice \x1b[2J 100% \u202e ü",
    },
    "a name of 20": {"k8senriched": "complete", "a" * 20: "x"},
}


@pytest.mark.parametrize("attrs", ENRICHED_OK.values(), ids=ENRICHED_OK.keys())
@pytest.mark.parametrize("mode", ["structured", "binary"])
def test_an_enriched_message_is_taken_in_both_modes(mode: str, attrs: dict[str, Any]) -> None:
    subject, headers, body = with_extensions(mode, **attrs)
    assert problems(message_for(subject, headers["Content-Type"]), headers, body) == []
    # and the decoder reads what the schemas take
    env = cloudevents.decode(headers, body)
    assert env.enriched == attrs["k8senriched"]
    extensions = {k: v for k, v in attrs.items() if not k.startswith("k8s")}
    assert env.enrichment == extensions


@pytest.mark.parametrize("mode", ["structured", "binary"])
def test_the_converters_enriched_messages_match_under_a_template_of_their_own(mode: str) -> None:
    """The bridge's converter with enrichment, complete and partial, on the real Events."""
    template = "{cluster}.{team}.{namespace}.{kind}.{reason}"
    converter = Converter("test", "k8s.events", mode, template)
    for n, ev in enumerate(real_events()):
        enrichment = Enrichment(values={"team": "payments", "ownerkind": "Deployment"})
        if n % 2:
            enrichment.miss("object", "timeout")
            enrichment.miss("namespace", "unknown")
        m = converter.convert(ev, enrichment)
        headers = dict(m.headers or _head(m.head))
        assert problems(message_for(m.subject, headers["Content-Type"]), headers, m.payload) == []
        attrs, _ = attributes(headers, m.payload)
        tokens = ("payments", attrs["k8snamespace"], attrs["k8skind"], attrs["k8sreason"])
        assert m.subject == "k8s.events.test." + ".".join(map(token, tokens))


ENRICHED_BAD = {
    "an extension without k8senriched": {"team": "payments"},
    "k8senriched unknown": {"k8senriched": "done"},
    "partial without what is missing": {"k8senriched": "partial"},
    "complete with something missing": {
        "k8senriched": "complete",
        "k8senrichmissing": "object:timeout",
    },
    "missing without k8senriched": {"k8senrichmissing": "object:timeout"},
    "an unknown part": {"k8senriched": "partial", "k8senrichmissing": "pod:timeout"},
    "an unknown why": {"k8senriched": "partial", "k8senrichmissing": "object:slow"},
    "a space in what is missing": {
        "k8senriched": "partial",
        "k8senrichmissing": "object:timeout, owner:timeout",
    },
    "nothing missing named": {"k8senriched": "partial", "k8senrichmissing": ""},
    "a name over 20": {"k8senriched": "complete", "a" * 21: "x"},
    "a name in capitals": {"k8senriched": "complete", "Team": "x"},
    "a name with _": {"k8senriched": "complete", "on_call": "x"},
}
STRUCTURED_ONLY_BAD = {
    "a number": {"k8senriched": "complete", "team": 7},
    "an object": {"k8senriched": "complete", "team": {"a": "b"}},
    "k8senriched a bool": {"k8senriched": True},
}


@pytest.mark.parametrize("attrs", ENRICHED_BAD.values(), ids=ENRICHED_BAD.keys())
@pytest.mark.parametrize("mode", ["structured", "binary"])
def test_an_enriched_message_of_another_shape_is_refused(mode: str, attrs: dict[str, Any]) -> None:
    subject, headers, body = with_extensions(mode, **attrs)
    assert problems(message_for(subject, headers["Content-Type"]), headers, body) != []


@pytest.mark.parametrize("attrs", STRUCTURED_ONLY_BAD.values(), ids=STRUCTURED_ONLY_BAD.keys())
def test_an_extension_that_is_not_a_string_is_refused(attrs: dict[str, Any]) -> None:
    subject, headers, body = with_extensions("structured", **attrs)
    assert problems(message_for(subject, headers["Content-Type"]), headers, body) != []


def test_status_events_stay_closed_to_extensions() -> None:
    for mode in ("structured", "binary"):
        subject, headers, body = status(mode, "gap")
        if mode == "structured":
            doc = {**json.loads(body), "k8senriched": "complete", "team": "x"}
            body = json.dumps(doc).encode()
        else:
            headers = {**headers, "ce-k8senriched": "complete", "ce-team": "x"}
        assert problems(message_for(subject, headers["Content-Type"]), headers, body) != []


# -- a real run -------------------------------------------------------------------------------


@pytest.fixture
def sim(leasing_sim):
    """The simulated API server, with Leases."""
    return leasing_sim


@pytest.fixture
def nats_server(tmp_path):
    """A nats-server -js whose max_payload a big Event passes (it is ``dropped``)."""
    conf = tmp_path / "nats.conf"
    conf.write_text(f"max_payload: {MAX_PAYLOAD}\n")
    server = NatsServer(store_dir=str(tmp_path / "nats"), args=["-c", str(conf)]).start()
    yield server
    server.stop()


def create(sim: SimApiServer, rng: random.Random, style: str, **fields: Any) -> dict[str, Any]:
    ev = make_event(rng, style=style)
    ev.update(fields)
    return sim.create_event(ev)


def bump(sim: SimApiServer, obj: dict[str, Any]) -> dict[str, Any]:
    return sim.bump_count(obj["metadata"]["namespace"], obj["metadata"]["name"])


async def status_seen(url: str, *whats: str) -> bool:
    have = {s.rsplit(".", 1)[1] for s, _, _ in await stream_messages(url) if "._bridge." in s}
    return set(whats) <= have


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["structured", "binary"])
async def test_every_message_of_a_real_run_matches_the_document(mode, sim, nats_server, run_bridge):
    """Events (Warning and Normal, listed and watched, count bumps, a series, a reason that is
    sanitised and percent-encoded) and every status event, read back from the stream."""
    rng = random.Random(12)
    url = nats_server.url
    create(sim, rng, "core", type="Warning", reason="BackOff")  # read by the first list
    create(sim, rng, "events.k8s.io", type="Normal", reason="Scheduled")
    sections: dict[str, Any] = {
        "cloudevents": {"mode": mode},
        "leader_election": {"enabled": True, "identity": "bridge-a", "namespace": "bridge"},
    }
    bridge = run_bridge(**sections)
    await bridge.wait_ready()
    warning = create(sim, rng, "core", type="Warning", reason="BackOff")
    bump(sim, bump(sim, warning))  # count 2, 3
    normal = create(sim, rng, "events.k8s.io", type="Normal", reason="Scheduled")
    bump(sim, bump(sim, normal))  # a series starts at 2
    create(sim, rng, "core", type="Warning", reason="Back off.ü 1")
    big = create(sim, rng, "core", type="Warning", reason="BackOff", message="x" * MAX_PAYLOAD)
    # three failed requests: unreachable, the breaker opens; a probe answered: it closes
    sim.faults.status_next = [(503, {})] * 3
    sim.close_watches()
    whats = ("started", "leader_changed", "dropped", "apiserver_unreachable")
    more = ("apiserver_degraded", "apiserver_recovered", "apiserver_reachable")
    await eventually(lambda: status_seen(url, *whats, *more), timeout=60)
    bridge.signal(signal.SIGTERM)
    assert await bridge.wait_exit() == 0
    # the history compacted while it was stopped: the next one reports a gap
    bump(sim, warning)
    bump(sim, warning)
    sim.compact()
    again = run_bridge(**sections)
    await again.wait_ready()
    await eventually(lambda: status_seen(url, "gap"), timeout=30)
    again.signal(signal.SIGTERM)
    assert await again.wait_exit() == 0

    messages = await stream_messages(url)
    seen: dict[str, int] = {}
    events: list[tuple[dict[str, Any], Any]] = []
    for subject, headers, body in messages:
        assert headers["Content-Type"] == CONTENT_TYPES[mode]
        key = message_for(subject, headers["Content-Type"])
        assert problems(key, headers, body) == [], (subject, headers, body[:500])
        seen[message(key)["name"]] = seen.get(message(key)["name"], 0) + 1
        attrs, data = attributes(headers, body)
        assert headers["Nats-Msg-Id"] == attrs["id"]
        if "._bridge." in subject:
            assert subject == f"k8s.events.test._bridge.{attrs['subject']}"
            continue
        events.append((attrs, data))
        assert attrs["id"] == f"{data['metadata']['uid']}/{data['metadata']['resourceVersion']}"
        tokens = (attrs["k8snamespace"], attrs["k8skind"], attrs["k8sreason"])
        assert subject == "k8s.events.test." + ".".join(map(token, tokens))
    assert set(seen) == {"kubernetesEvent", *STATUS}, seen
    assert seen["started"] == seen["stopped"] == seen["leader_changed"] == 2
    types = {a["type"] for a, _ in events}
    assert types == {"io.k8s.event.warning", "io.k8s.event.normal"}
    assert any(int(a["k8scount"]) >= 3 and d.get("count") for a, d in events), "no count bump"
    assert any(d.get("series") for _, d in events), "no series"
    assert any(a["k8sreason"] == "Back off.ü 1" for a, _ in events)
    assert big["metadata"]["uid"] not in {d["metadata"]["uid"] for _, d in events}
    # and the same validation refuses a real message with managedFields, or without its id
    subject, headers, body = next(m for m in messages if "._bridge." not in m[0])
    key = message_for(subject, headers["Content-Type"])
    payload = json.loads(body)
    (payload["data"] if mode == "structured" else payload)["metadata"]["managedFields"] = []
    assert problems(key, headers, json.dumps(payload).encode())
    if mode == "structured":
        payload = {k: v for k, v in json.loads(body).items() if k != "id"}
        assert problems(key, headers, json.dumps(payload).encode())
    else:
        assert problems(key, {k: v for k, v in headers.items() if k != "ce-id"}, body)


# -- digests: the format's every member, its bounds, real digests and broken ones -------------

DIGEST_START = datetime(2026, 11, 30, 20, 5, tzinfo=UTC)


def a_digest(**changes: Any) -> digests.Digest:
    series = digests.Series(
        cluster="prod-eu-1",
        namespace="shop",
        kind="Pod",
        name="api-7d4b9c6f5-x2k9p",
        uid="201c3730-c0aa-4c21-81ba-66e8315ab830",
        reason="BackOff",
        type="Warning",
        reporting_component="kubelet",
    )
    d = digests.Digest(
        series=series,
        start=DIGEST_START,
        end=DIGEST_START + timedelta(minutes=5),
        occurrences=57,
        versions=31,
        first_seen=DIGEST_START + timedelta(seconds=2),
        last_seen=DIGEST_START + timedelta(seconds=298),
        count_from=12,
        count_to=69,
        uids=("737faf0a-1486-45fa-9eb4-915219cc1335",),
        uids_omitted=0,
        first_message="Back-off restarting failed container api",
        last_message="Back-off restarting failed container api",
        sampled=True,
        combined=False,
        stream="K8S_EVENTS",
        first_seq=3071,
        last_seq=3348,
    )
    series_fields = {f.name for f in fields(digests.Series)}
    series_changes = {k: changes.pop(k) for k in list(changes) if k in series_fields}
    return replace(d, series=replace(series, **series_changes), **changes)


def digest_problems(d: digests.Digest) -> list[str]:
    subject = digests.subject(digests.DEFAULT_PREFIX, d.series)
    headers = digests.headers(d)
    return problems(message_for(subject, headers["Content-Type"]), headers, digests.encode(d))


def schema_at(name: str, *path: str) -> dict[str, Any]:
    node: dict[str, Any] = SCHEMAS[name]
    for part in path:
        node = node[part]
    return node


def test_the_digest_schemas_name_every_member_of_the_format_in_its_order() -> None:
    """digests.document is the format: every member of it is in the schema, required, in the
    same order, and nothing else (a member added to the format fails here until written)."""
    doc = digests.document(a_digest())
    top = schema_at("digest-cloudevent.json")
    assert list(top["properties"]) == list(doc) == top["required"]
    assert top["additionalProperties"] is False
    data = schema_at("digest-data.json")
    assert list(data["properties"]) == list(doc["data"]) == data["required"]
    assert data["additionalProperties"] is False
    nested = {
        "series": schema_at("digest-data.json", "$defs", "series"),
        "window": schema_at("digest-data.json", "$defs", "window"),
        "counts": schema_at("digest-data.json", "properties", "counts"),
        "stream": schema_at("digest-data.json", "$defs", "stream"),
    }
    for member, schema in nested.items():
        assert list(schema["properties"]) == list(doc["data"][member]) == schema["required"]
        assert schema["additionalProperties"] is False, member
    assert top["properties"]["type"]["const"] == digests.TYPE


def test_the_digest_schemas_bounds_are_the_readers() -> None:
    defs = schema_at("digest-data.json", "$defs")
    assert defs["text"]["maxLength"] == digests.MAX_TEXT
    assert defs["message"]["maxLength"] == digests.MAX_MESSAGE
    assert defs["count"]["maximum"] == digests.MAX_NUMBER and defs["count"]["minimum"] == 0
    assert schema_at("digest-data.json", "properties", "events")["maxItems"] == digests.MAX_UIDS
    headers = schema_at("digest-headers.json", "properties")
    assert headers["Content-Type"]["const"] == digests.HEADERS["Content-Type"]


GOOD_DIGESTS = {
    "ordinary": {},
    "untrusted": {"name": "", "uid": "", "untrusted": True},
    "no object uid, a Normal type": {"uid": "", "type": "Normal"},
    "no times seen": {"first_seen": None, "last_seen": None},
    "microseconds": {"first_seen": DIGEST_START + timedelta(microseconds=7)},
    "no namespace": {"namespace": ""},
    "every bound": {
        "first_message": "ü" * digests.MAX_MESSAGE,
        "last_message": "x" * digests.MAX_MESSAGE,
        "uids": tuple(f"uid-{n}" for n in range(digests.MAX_UIDS)),
        "uids_omitted": 3,
        "occurrences": digests.MAX_NUMBER,
        "count_to": digests.MAX_NUMBER,
        "reason": "R" * digests.MAX_TEXT,
    },
    "nothing advanced, combined": {
        "occurrences": 0,
        "count_from": 5,
        "count_to": 5,
        "combined": True,
    },
    "hostile text": {"last_message": "\x1b[2J\u202e\x00 ü", "reason": "Back off.ü 1"},
    "a window of 30 s": {"end": DIGEST_START + timedelta(seconds=30)},
}


@pytest.mark.parametrize("changes", GOOD_DIGESTS.values(), ids=GOOD_DIGESTS.keys())
def test_digests_made_by_the_format_match_the_document(changes: dict[str, Any]) -> None:
    d = a_digest(**changes)
    assert digest_problems(d) == []
    # and the readers' decoder takes what the schema takes
    assert digests.from_envelope(cloudevents.decode(digests.headers(d), digests.encode(d))) == d


def test_the_documents_digest_example_is_a_digest_the_format_reads_back() -> None:
    (example,) = message("digest")["examples"]
    body = json.dumps(example["payload"]).encode()
    d = digests.from_envelope(cloudevents.decode(example["headers"], body))
    assert digests.document(d) == example["payload"]  # its id is its series' and window's
    assert example["headers"]["Nats-Msg-Id"] == d.id


@pytest.mark.parametrize(
    ("path", "value"),
    [  # each breaks one promise of the digest's schemas
        pytest.param("body.id", GONE, id="id missing"),
        pytest.param("body.id", "digest/XYZ", id="id not 32 hex digits"),
        pytest.param("body.type", "io.k8s.event.warning", id="another type"),
        pytest.param("body.extra", "x", id="an unknown attribute"),
        pytest.param("body.k8soccurrences", "57", id="k8soccurrences a string"),
        pytest.param("body.time", "yesterday", id="time not RFC 3339"),
        pytest.param("body.data.occurrences", -1, id="occurrences negative"),
        pytest.param("body.data.occurrences", 2**53 + 1, id="occurrences over MAX_NUMBER"),
        pytest.param("body.data.versions", 1.5, id="versions not whole"),
        pytest.param("body.data.lastMessage", "x" * 1025, id="a message over MAX_MESSAGE"),
        pytest.param("body.data.events", ["u"] * 17, id="uids over MAX_UIDS"),
        pytest.param("body.data.events", [7], id="a uid not a string"),
        pytest.param("body.data.series.reason", "R" * 1025, id="a reason over MAX_TEXT"),
        pytest.param("body.data.series.untrusted", "no", id="untrusted not a boolean"),
        pytest.param("body.data.series.team", "x", id="a series member not in the format"),
        pytest.param("body.data.new", 1, id="a data member not in the format"),
        pytest.param("body.data.window.start", GONE, id="a window without its start"),
        pytest.param("body.data.firstSeen", 0, id="firstSeen a number"),
        pytest.param("body.data.counts.to", None, id="a count null"),
        pytest.param("body.data.stream.firstSequence", GONE, id="a range without its start"),
        pytest.param("body.data.sampled", "true", id="sampled a string"),
        pytest.param("headers.Nats-Msg-Id", GONE, id="Nats-Msg-Id missing"),
        pytest.param("headers.Content-Type", "application/json", id="binary mode"),
        pytest.param("headers.ce-type", "io.k8s.digest", id="a ce- header"),
    ],
)
def test_a_broken_digest_is_refused(path: str, value: Any) -> None:
    d = a_digest()
    msg = {"headers": digests.headers(d), "body": digests.document(d)}
    *parents, last = path.split(".")
    target = pointer(msg, "/".join(parents))
    if value is GONE:
        del target[last]
    else:
        target[last] = value
    assert problems("digest", msg["headers"], json.dumps(msg["body"]).encode()) != []


def test_an_untrusted_digest_names_no_object() -> None:
    d = a_digest(name="", uid="", untrusted=True)
    doc = digests.document(d)
    doc["data"]["series"]["name"] = "web-1"
    assert problems("digest", digests.headers(d), json.dumps(doc).encode()) != []


_text = st.text(max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    name=_text,
    reason=_text,
    message=st.text(max_size=digests.MAX_MESSAGE),
    uids=st.lists(_text, max_size=digests.MAX_UIDS),
    numbers=st.lists(st.integers(0, digests.MAX_NUMBER), min_size=6, max_size=6),
    seconds=st.integers(1, 86400),
    untrusted=st.booleans(),
    seen=st.one_of(st.none(), st.datetimes(timezones=st.just(UTC))),
)
def test_any_digest_of_the_format_matches_the_document(
    name: str,
    reason: str,
    message: str,
    uids: list[str],
    numbers: list[int],
    seconds: int,
    untrusted: bool,
    seen: datetime | None,
) -> None:
    occurrences, versions, count_from, count_to, first_seq, last_seq = numbers
    d = a_digest(
        name="" if untrusted else digests.bounded(name),
        uid="" if untrusted else "u",
        untrusted=untrusted,
        reason=digests.bounded(reason),
        last_message=digests.bounded(message),
        uids=tuple(digests.bounded(u) for u in uids),
        occurrences=occurrences,
        versions=versions,
        count_from=count_from,
        count_to=count_to,
        first_seq=first_seq,
        last_seq=last_seq,
        end=DIGEST_START + timedelta(seconds=seconds),
        first_seen=seen,
    )
    assert digest_problems(d) == []


def test_a_digest_seen_before_year_1000_spells_its_year_in_4_digits() -> None:
    d = a_digest(first_seen=datetime(999, 1, 1, tzinfo=UTC))
    assert digest_problems(d) == []
    assert digests.from_envelope(cloudevents.decode(digests.headers(d), digests.encode(d))) == d
