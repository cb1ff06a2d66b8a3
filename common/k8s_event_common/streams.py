"""The shapes of the streams and buckets the programs use, and the check that one in JetStream
has exactly that shape: no program runs on a stream someone else gave another shape.

A stream's configuration decides what the programs' promises are worth: a stream with
``allow_rollup_hdrs`` is emptied by one publish with ``Nats-Rollup: all``; a bucket with a
``republish`` copies every write into any subject, an Event's among them; ``sources``, a
``mirror`` or a ``subject_transform`` let messages in that no publisher of ours sent;
``deny_purge: false`` lets a purge through; ``allow_direct`` answers a direct get with the
stored message itself, body and headers, on whatever reply subject the request names, and
nats-server checks a request's subject against the permissions, not its reply subject: a
bucket with direct gets lets whoever may write it and direct-get it store a forged CloudEvent
in the bridge's stream under any Event subject. So each program reads the whole configuration of
every stream and bucket it uses (``read_config``: JetStream's own JSON, every key, also keys this
code does not know yet) and compares it with the shape it was built for (``differences``):

- ``event_stream``: the bridge's ``K8S_EVENTS``: limits retention, file storage, the sizes the
  bridge's settings give, ``deny_delete`` and ``deny_purge`` on, nothing else;
- ``dead_letter_stream``: where a subscriber puts a message its endpoint refused for good
  (``K8S_EVENTS_DEAD``): limits retention, file storage, ``deny_delete`` on, purges allowed
  (an operator clears what was dealt with), each message id kept for the duplicate window;
- ``kv_bucket``: a KV bucket (``KV_<bucket>``): the stream nats-py's ``create_key_value`` makes
  (rollups, per-message TTLs and discard-new are how KV works), with no republish.

Left unchecked, because they weaken nothing: ``description``, ``metadata`` (the server writes
its own ``_nats.*`` keys), ``placement``, ``first_seq``, ``compression`` (how the server stores,
not what). Any other
key, a key of a newer server included, must have the shape's value, or be absent or zero-like
where the shape does not set it.

A difference is a configuration problem: the program names each one (``ShapeMismatch``, and
one log line ``stream_config_differs`` per key) and stops; an operator fixes the stream
(``k8s-event-bridge provision``, docs/deploy.md).

What a program does with them: ``ensure`` (a stream or bucket of its own: checked, or created
when missing and allowed), ``check_event_stream`` (what a subscriber checks of the bridge's
stream), ``refuse`` (a configuration read in hand), ``provision`` (an operator's command).
Their errors::

    ShapeMismatch                 there, in another shape: each key named (and logged)
    nats.js.errors.NotFoundError
    └── StreamMissing             not there, and not made: ``create`` false, or made and gone
        └── StreamNotCreated      not there, and the request to create it got no answer (the
                                  credentials may not: the shipped permissions answer nothing)

and nats-py's own otherwise, as ``read_config`` says (``APIError`` for JetStream's answers,
a refused create among them; ``nats.errors.TimeoutError`` when none came).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from k8s_event_common.logformat import Logger

API = "$JS.API"
KV_PREFIX = "KV_"
LOGGER = "k8s_event_common.streams"  # the logger of ``ensure`` and ``refuse``, unless given one
STREAM_NAME_IN_USE = 10058  # JetStream's err_code: a stream of that name, in another shape

# keys that weaken nothing, whatever their value (the module docstring says why)
UNCHECKED = frozenset(
    {
        "name",  # compared apart: the stream read is the one named
        "description",
        "metadata",
        "placement",
        "first_seq",
        "compression",
    }
)
# the sizes the bridge's settings give: a subscriber does not know them
SIZING = frozenset({"max_age", "max_bytes", "num_replicas", "duplicate_window"})

# JetStream's value for a key the request left out (as the server writes it back)
DEFAULTS: dict[str, Any] = {
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "discard": "old",
    "discard_new_per_subject": False,
    "max_age": 0,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "storage": "file",
    "num_replicas": 1,
    "no_ack": False,
    "sealed": False,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
    "allow_direct": False,  # a direct get answers with the message itself: see above
    "mirror_direct": False,
    "allow_msg_ttl": False,
    "allow_msg_schedules": False,
    "allow_atomic": False,
    "allow_batched": False,
    "allow_msg_counter": False,
    "persist_mode": "default",
    "subject_delete_marker_ttl": 0,
    "consumer_limits": {},
    "sources": [],
    "subjects": [],
}


def api_prefix(domain: str | None = None) -> str:
    """The JetStream API's subject prefix: ``$JS.API``, or ``$JS.<domain>.API``."""
    return f"$JS.{domain}.API" if domain else API


def event_stream(
    name: str,
    subject_prefix: str,
    *,
    max_age: float,
    max_bytes: int = -1,
    num_replicas: int = 1,
    duplicate_window: float,
) -> StreamConfig:
    """The bridge's stream: every subject under ``<subject_prefix>.``, kept ``max_age``
    seconds; nothing deleted or purged but by its limits; nothing in but what is published."""
    return _kept(
        name,
        [f"{subject_prefix}.>"],
        max_age=max_age,
        max_bytes=max_bytes,
        num_replicas=num_replicas,
        duplicate_window=duplicate_window,
        deny_purge=True,
    )


def digest_stream(
    name: str,
    subject_prefix: str,
    *,
    max_age: float,
    max_bytes: int = -1,
    num_replicas: int = 1,
    duplicate_window: float = 120.0,
) -> StreamConfig:
    """The digests' stream (``k8s_event_common.digests``): every subject under
    ``<subject_prefix>.``, kept ``max_age`` seconds; nothing deleted one by one, but it may be
    purged: the digests are a projection of the versions stream, and an operator who purges
    them has ``k8s-event-digests`` write them again from the versions still kept."""
    return _kept(
        name,
        [f"{subject_prefix}.>"],
        max_age=max_age,
        max_bytes=max_bytes,
        num_replicas=num_replicas,
        duplicate_window=duplicate_window,
        deny_purge=False,
    )


def dead_letter_stream(
    name: str,
    subjects: list[str],
    *,
    max_age: float,
    num_replicas: int = 1,
    duplicate_window: float = 120.0,
) -> StreamConfig:
    """A subscriber's dead letters: the messages its endpoint refused for good, with the
    endpoint's reason in their headers, kept ``max_age`` seconds (0: until purged); a message
    id (``Nats-Msg-Id``, the CloudEvent id) stored once within ``duplicate_window``."""
    return _kept(
        name,
        list(subjects),
        max_age=max_age,
        max_bytes=-1,
        num_replicas=num_replicas,
        duplicate_window=duplicate_window,
        deny_purge=False,
    )


def _kept(
    name: str,
    subjects: list[str],
    *,
    max_age: float,
    max_bytes: int,
    num_replicas: int,
    duplicate_window: float,
    deny_purge: bool,
) -> StreamConfig:
    """A stream of messages kept by limits on a file: the oldest go first, no message deleted
    one by one, no rollup; every setting named, so that a shape compares whole."""
    return StreamConfig(
        name=name,
        subjects=subjects,
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        max_age=max_age,
        max_bytes=max_bytes,
        max_msgs=-1,
        max_msgs_per_subject=-1,
        max_msg_size=-1,
        max_consumers=-1,
        num_replicas=num_replicas,
        duplicate_window=duplicate_window,
        deny_delete=True,
        deny_purge=deny_purge,
        allow_rollup_hdrs=False,
    )


def kv_bucket(
    bucket: str, *, history: int, ttl: float | None = None, replicas: int = 1
) -> StreamConfig:
    """The stream of KV bucket ``bucket``, as nats-py's ``create_key_value`` makes it from
    ``KeyValueConfig(bucket, history, ttl, replicas)``: no republish, no value-size limit."""
    duplicate_window = 120.0
    if ttl and ttl < duplicate_window:
        duplicate_window = ttl
    return StreamConfig(
        name=KV_PREFIX + bucket,
        subjects=[f"$KV.{bucket}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.NEW,
        allow_rollup_hdrs=True,
        allow_msg_ttl=True,
        deny_delete=True,
        deny_purge=False,
        duplicate_window=duplicate_window,
        max_age=ttl or 0,
        max_bytes=-1,
        max_consumers=-1,
        max_msg_size=-1,
        max_msgs=-1,
        max_msgs_per_subject=history,
        num_replicas=replicas,
    )


@dataclass(frozen=True)
class Difference:
    """One key whose value is not the shape's."""

    key: str
    have: Any
    want: Any

    def __str__(self) -> str:
        return f"{self.key}={show(self.have)} (wanted {show(self.want)})"


def show(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


class StreamMissing(nats.js.errors.NotFoundError):
    """The stream or bucket is not there, and was not made: ``create`` was false, or it was
    made and is gone again. ``description`` says which, ``stream`` names it."""

    def __init__(self, stream: str, description: str) -> None:
        super().__init__(code=404, description=description, stream=stream)

    def __str__(self) -> str:
        return self.description or ""


class StreamNotCreated(StreamMissing):
    """The stream or bucket is not there, and the request to create it got no answer: the
    credentials may not create it (the shipped permissions answer nothing), or JetStream is
    away. Provision it (docs/deploy.md)."""


class ShapeMismatch(Exception):
    """A stream or bucket is there with another shape; ``differences`` names each key."""

    def __init__(self, stream: str, differences: list[Difference]) -> None:
        self.stream = stream
        self.differences = differences
        super().__init__(
            f"stream {stream} differs from the shape it must have: "
            + ", ".join(str(d) for d in differences)
            + " (provision it as docs/deploy.md says; no program of ours changes it)"
        )


def wire(config: StreamConfig | Mapping[str, Any]) -> dict[str, Any]:
    """A configuration as JetStream's JSON has it (durations in nanoseconds)."""
    if isinstance(config, StreamConfig):
        return dict(config.as_dict())
    return dict(config)


def _zero_like(v: Any) -> bool:
    return v is None or v is False or v == 0 or v == -1 or v == "" or v == [] or v == {}


def _norm(key: str, v: Any) -> Any:
    if v is None:
        return DEFAULTS.get(key)
    if key == "subjects" and isinstance(v, list):
        return sorted(v)
    return v


def differences(
    have: Mapping[str, Any],
    want: StreamConfig | Mapping[str, Any],
    *,
    unchecked: Iterable[str] = (),
) -> list[Difference]:
    """Every key of ``have`` (JetStream's JSON of a stream's config) whose value is not
    ``want``'s, sorted by key; keys in ``UNCHECKED`` and ``unchecked`` are passed over."""
    w = wire(want)
    skip = UNCHECKED | frozenset(unchecked)
    out = []
    for key in sorted((set(have) | set(w) | set(DEFAULTS)) - skip):
        a = _norm(key, have.get(key))
        b = _norm(key, w.get(key))
        if key not in DEFAULTS and key not in w:
            # a key this code does not know (a newer server's): only its "off" value passes
            if not _zero_like(a):
                out.append(Difference(key, a, None))
            continue
        if a != b:
            out.append(Difference(key, a, b))
    return out


async def read_config(
    nc: NATS, name: str, *, api: str = API, timeout: float = 5.0
) -> dict[str, Any] | None:
    """The stream's configuration as JetStream answers it (every key), None when it does not
    exist. Raises nats-py's errors as ``JetStreamContext.stream_info`` does: ``APIError`` (503:
    ``ServiceUnavailableError``) for JetStream's answers, ``nats.errors.TimeoutError`` when none
    came (also when the permissions refuse the request)."""
    try:
        resp = await _request(nc, f"{api}.STREAM.INFO.{name}", None, timeout)
    except nats.js.errors.NotFoundError:
        return None
    config: dict[str, Any] = resp["config"]
    return config


async def ensure(
    nc: NATS,
    want: StreamConfig,
    what: str,
    *,
    create: bool = True,
    unchecked: Sequence[str] = (),
    domain: str | None = None,
    logger: str = LOGGER,
) -> dict[str, Any]:
    """The configuration JetStream answered for the stream ``want`` names (``what`` says what
    it is in the messages: "stream", "bucket", ...), checked against ``want``: ``refuse``
    raises ``ShapeMismatch`` on any difference but in ``unchecked``, logged once per key.
    When missing, created with exactly ``want`` if ``create`` (logged ``stream_created``), else
    ``StreamMissing``; a create that gets no answer (the shipped permissions grant no program
    ``STREAM.CREATE``) raises ``StreamNotCreated``; one that JetStream refuses, nats-py's
    ``APIError``; one made meanwhile by someone else is read and checked. ``domain``: through
    ``$JS.<domain>.API``."""
    assert want.name is not None
    name = want.name
    api = api_prefix(domain)
    have = await read_config(nc, name, api=api)
    if have is None:
        if not create:
            raise StreamMissing(
                name, f"{what} {name} does not exist: provision it (docs/deploy.md)"
            )
        try:
            await nc.jetstream(domain=domain).add_stream(want)
        except TimeoutError as exc:  # nats-py's TimeoutError is one
            raise StreamNotCreated(
                name,
                f"{what} {name} does not exist and creating it got no answer (may these "
                "credentials create it? provision it: docs/deploy.md)",
            ) from exc
        except nats.js.errors.APIError as exc:
            if exc.err_code != STREAM_NAME_IN_USE:
                raise
            # made meanwhile, in another shape: read and compared below
        else:
            Logger(logger).info("stream_created", stream=name, what=what, subjects=want.subjects)
        have = await read_config(nc, name, api=api)
        if have is None:
            raise StreamMissing(name, f"{what} {name}: created, and gone again")
    refuse(have, want, unchecked, what=what, logger=logger)
    return have


def refuse(
    have: dict[str, Any],
    want: StreamConfig,
    unchecked: Sequence[str] = (),
    *,
    what: str = "stream",
    logger: str = LOGGER,
) -> None:
    """Raise ``ShapeMismatch`` naming every key ``have`` (JetStream's configuration of a
    stream) differs in from ``want``, but those in ``unchecked``; each logged first
    (``log_differences``)."""
    diffs = differences(have, want, unchecked=unchecked)
    if diffs:
        log_differences(diffs, want, what, logger=logger)
        raise ShapeMismatch(str(want.name), diffs)


def log_differences(
    diffs: Iterable[Difference], want: StreamConfig, what: str, *, logger: str = LOGGER
) -> None:
    """One ERROR line ``stream_config_differs`` for each key that differs: ``what``,
    ``stream``, ``key``, ``existing`` and ``wanted`` (their JSON)."""
    log = Logger(logger)
    for d in diffs:
        log.error(
            "stream_config_differs",
            what=what,
            stream=want.name,
            key=d.key,
            existing=show(d.have),
            wanted=show(d.want),
        )


async def check_event_stream(
    nc: NATS, stream: str, subject_prefix: str | None = None, *, logger: str = LOGGER
) -> None:
    """The bridge's stream checked for what a subscriber relies on: every key of its shape
    (``event_stream``) but the sizes the bridge's settings give (``SIZING``), and its subjects
    when ``subject_prefix`` is given. ``ShapeMismatch`` names each difference (a stream with
    rollups, sources, a mirror, purges allowed ...); ``StreamMissing`` when it is not there (a
    subscriber never creates it: the bridge does, or an operator)."""
    want = event_stream(stream, subject_prefix or "", max_age=0, duplicate_window=0)
    await _check_read(nc, want, bool(subject_prefix), logger)


async def check_digest_stream(
    nc: NATS, stream: str, subject_prefix: str | None = None, *, logger: str = LOGGER
) -> None:
    """The digests' stream checked for what a reader relies on, as ``check_event_stream`` checks
    the versions stream: every key of ``digest_stream`` but its sizes (``SIZING``), and its
    subjects when ``subject_prefix`` is given. ``StreamMissing`` when it is not there: the
    digests' program makes it (``k8s-event-digests``, or its ``provision``)."""
    want = digest_stream(stream, subject_prefix or "", max_age=0, duplicate_window=0)
    await _check_read(nc, want, bool(subject_prefix), logger)


async def _check_read(nc: NATS, want: StreamConfig, subjects: bool, logger: str) -> None:
    """What a reader checks of a stream someone else makes: every key of ``want`` but its
    sizes, and its subjects only when asked."""
    assert want.name is not None
    have = await read_config(nc, want.name)
    if have is None:
        raise StreamMissing(want.name, f"stream {want.name} not found")
    unchecked = [*SIZING, *([] if subjects else ["subjects"])]
    refuse(have, want, unchecked, logger=logger)


def seen_bucket(bucket: str, *, ttl: float = 7 * 86400.0, replicas: int = 1) -> StreamConfig:
    """A subscriber's bucket of the CloudEvent ids it handled (one value a key)."""
    return kv_bucket(bucket, history=1, ttl=ttl, replicas=replicas)


async def provision(
    nc: NATS, want: StreamConfig, *, api: str = API, update: bool = False, timeout: float = 5.0
) -> str:
    """Make the stream ``want`` names have exactly its shape, with an operator's credentials:
    "created" when missing, "unchanged" when it has the shape, "updated" when it differed and
    ``update`` let JetStream change it. Raises ``ShapeMismatch`` naming each difference when it
    differs (and ``update`` is false, or JetStream will not change those keys), and nats-py's
    errors as ``read_config``."""
    name = str(want.name)
    have = await read_config(nc, name, api=api, timeout=timeout)
    body = wire(want)
    if have is None:
        await _request(nc, f"{api}.STREAM.CREATE.{name}", body, timeout)
        status = "created"
    elif not (diffs := differences(have, want)):
        return "unchanged"
    elif not update:
        raise ShapeMismatch(name, diffs)
    else:
        kept = {k: have[k] for k in UNCHECKED if k in have and k != "metadata"}
        await _request(nc, f"{api}.STREAM.UPDATE.{name}", {**kept, **body}, timeout)
        status = "updated"
    after = await read_config(nc, name, api=api, timeout=timeout)
    if diffs := differences(after or {}, want):  # keys JetStream took and did not change
        raise ShapeMismatch(name, diffs)
    return status


async def _request(
    nc: NATS, subject: str, body: Mapping[str, Any] | None, timeout: float
) -> dict[str, Any]:
    """One JetStream API request, its answer's JSON; an error answer raised as nats-py raises
    it (``APIError.from_error``: 404 ``NotFoundError``, 503 ``ServiceUnavailableError`` ...), no
    responder as 503."""
    payload = b"" if body is None else json.dumps(body).encode()
    try:
        msg = await nc.request(subject, payload, timeout=timeout)
    except nats.errors.NoRespondersError:
        raise nats.js.errors.ServiceUnavailableError from None
    resp: dict[str, Any] = json.loads(msg.data)
    err = resp.get("error")
    if err is not None:
        nats.js.errors.APIError.from_error(err)  # raises
    return resp
