"""docs/asyncapi.yaml and its JSON Schemas (docs/schemas/): well-formed, valid AsyncAPI 3.0.0,
and true of the messages the bridge writes — captured Kubernetes Events converted, and every
message of a real run (the bridge process, a real nats-server, the simulated API server)."""

from __future__ import annotations

import json
import random
import re
import signal
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urldefrag, urljoin

import pytest
import yaml
from jsonschema import Draft7Validator, Draft202012Validator, FormatChecker
from referencing import Registry, Resource

from bridge.core.converting import Converter
from bridge.core.enrichment import Enrichment
from k8s_event_common import cloudevents, subjects
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


def test_the_document_is_asyncapi_3_with_both_channels_sent_by_the_bridge():
    assert DOC["asyncapi"] == "3.0.0"
    assert DOC["info"]["version"] == "0.2.0"  # 0.2.0: the subject template, enrichment
    assert {s["protocol"] for s in DOC["servers"].values()} == {"nats"}
    channels = DOC["channels"]
    assert (
        channels["kubernetesEvents"]["address"] == "{prefix}.{cluster}.{namespace}.{kind}.{reason}"
    )
    assert channels["statusEvents"]["address"] == "{prefix}.{cluster}._bridge.{what}"
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
