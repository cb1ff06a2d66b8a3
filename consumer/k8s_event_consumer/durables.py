"""A subscriber's durable consumer, checked before it is read: a pull consumer with explicit
acks and the subscriber's own config, never a push consumer (its delivery would go into
anyone's inbox) nor headers-only (every message would come without its body: counted bad,
terminated, lost to this subscriber). ``bind`` checks, updates what JetStream lets change,
creates a missing one where the credentials may, and binds to it."""

from __future__ import annotations

import contextlib
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js.api import ConsumerConfig

from k8s_event_common.logformat import Logger
from k8s_event_consumer.options import Start

log = Logger("k8s_event_consumer.durables")

# what a durable of ours sets, and what it must not have
DURABLE_KEYS = ("ack_policy", "ack_wait", "max_deliver", "max_ack_pending", "filter_subject")
PUSH_KEYS = ("deliver_subject", "deliver_group")
FORBIDDEN_KEYS = (*PUSH_KEYS, "headers_only")


class ConsumerConflict(Exception):
    """The durable exists with a config these credentials may not or JetStream will not
    change, or is missing and these credentials may not create it."""


def differences(have: ConsumerConfig, want: ConsumerConfig) -> dict[str, tuple[Any, Any]]:
    """{key: (existing, wanted)} for each key the durable's config differs in."""
    out: dict[str, tuple[Any, Any]] = {}
    for key in DURABLE_KEYS:
        a, b = getattr(have, key), getattr(want, key)
        if isinstance(a, float) or isinstance(b, float):
            same = a is not None and b is not None and abs(float(a) - float(b)) < 1e-3
        else:
            same = a == b
        if not same:
            out[key] = (a, b)
    if sorted(have.filter_subjects or []) != sorted(want.filter_subjects or []):
        out["filter_subjects"] = (have.filter_subjects, want.filter_subjects)
    for key in FORBIDDEN_KEYS:
        if getattr(have, key):
            out[key] = (getattr(have, key), None)
    return out


async def bind(
    nc: NATS,
    *,
    stream: str,
    durable: str,
    config: ConsumerConfig,
    start: Start | None = None,
    replay: bool = False,
) -> Any:
    """The pull subscription of the durable ``durable`` on ``stream``, with ``config``:
    created from ``start`` when missing (where the credentials may: the shipped permissions do
    not, it is provisioned first); an existing one with another config updated where
    JetStream and the credentials let it (ack_wait, max_deliver, max_ack_pending, subjects),
    else ``ConsumerConflict`` naming each difference. ``replay``: an existing durable is
    dropped and made again from ``start``."""
    js = nc.jetstream()
    existing = None
    with contextlib.suppress(nats.js.errors.NotFoundError):
        existing = await js.consumer_info(stream, durable)
    if existing is not None and replay:
        await js.delete_consumer(stream, durable)
        existing = None
    if existing is None:
        start = start or Start.all()
        try:
            await js.add_consumer(stream, config=start.apply(config))
        except (nats.errors.TimeoutError, TimeoutError) as exc:
            raise ConsumerConflict(
                f"durable {durable} on {stream} does not exist and these credentials may "
                "not create it: provision it (docs/deploy.md)"
            ) from exc
        log.info("consumer_created", durable=durable, start=start.policy.value)
    else:
        await _update(js, stream, durable, existing.config, config)
        log.info("consumer_bound", durable=durable)
    return await js.pull_subscribe_bind(durable=durable, stream=stream)


async def _update(
    js: Any, stream: str, durable: str, old: ConsumerConfig, config: ConsumerConfig
) -> None:
    diffs = differences(old, config)
    if not diffs:
        return
    config.deliver_policy = old.deliver_policy
    config.opt_start_time = old.opt_start_time
    config.opt_start_seq = old.opt_start_seq
    try:
        forbidden = [k for k in FORBIDDEN_KEYS if k in diffs]
        if forbidden:
            raise nats.js.errors.BadRequestError(
                description=f"{', '.join(forbidden)} set: not changed here"
            )
        await js.add_consumer(stream, config=config)
    except (nats.js.errors.BadRequestError, nats.errors.TimeoutError) as exc:
        raise ConsumerConflict(
            f"durable {durable} on {stream} exists with another config ("
            + ", ".join(f"{k}={h!r} (wanted {w!r})" for k, (h, w) in diffs.items())
            + f") that these credentials may not or JetStream will not change: {exc}"
        ) from exc
    log.info("consumer_updated", durable=durable, keys=sorted(diffs))
