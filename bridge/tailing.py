"""``k8s-event-bridge tail``: read the stream and print events as a person wants to read them."""

from __future__ import annotations

import sys
from typing import Any, TextIO
from urllib.parse import unquote

import msgspec
import nats.js.errors
from nats.js.api import DeliverPolicy

from bridge import natsconn
from bridge.settings import Settings


def decode(headers: dict[str, str] | None, body: bytes) -> dict[str, Any]:
    """A CloudEvent message (structured or binary mode) → its attributes and ``data``."""
    ct = (headers or {}).get("Content-Type", "")
    if ct.startswith("application/cloudevents"):
        doc: dict[str, Any] = msgspec.json.decode(body)
        return doc
    attrs: dict[str, Any] = {
        k[3:]: unquote(v) for k, v in (headers or {}).items() if k.lower().startswith("ce-")
    }
    attrs["data"] = msgspec.json.decode(body) if body else None
    return attrs


def line(ce: dict[str, Any]) -> str:
    """``time  namespace  Kind/name  Reason  xN  message`` (status events marked ``bridge``)."""
    raw = ce.get("data")
    data: dict[str, Any] = raw if isinstance(raw, dict) else {}
    t = str(ce.get("time", ""))[:19].replace("T", " ")
    if str(ce.get("type", "")).startswith("io.k8s.bridge."):
        what = str(ce.get("type", "")).removeprefix("io.k8s.bridge.")
        detail = " ".join(f"{k}={v}" for k, v in data.items() if k != "meaning")
        return f"{t}  {'-':<16} {'bridge':<40} {what.upper():<22} {detail}"
    ns = ce.get("k8snamespace", "")
    subject = ce.get("subject", "")
    reason = ce.get("k8sreason", "")
    count = ce.get("k8scount", 1)
    kind = "W" if str(ce.get("type", "")).endswith("warning") else " "
    msg = str(data.get("message", "")).replace("\n", " ")
    return f"{t}  {ns:<16} {subject:<40} {kind} {reason:<20} x{count:<4} {msg}"


async def tail(
    settings: Settings,
    subject: str | None,
    *,
    all_: bool,
    count: int | None,
    out: TextIO = sys.stdout,
) -> int:
    nc = await natsconn.connect(settings.nats)
    js = nc.jetstream()
    subject = subject or f"{settings.nats.subject_prefix}.>"
    policy = DeliverPolicy.ALL if all_ else DeliverPolicy.NEW
    try:
        sub = await js.subscribe(
            subject, stream=settings.nats.stream, ordered_consumer=True, deliver_policy=policy
        )
    except nats.js.errors.NotFoundError:
        print(
            f"k8s-event-bridge: no stream {settings.nats.stream} on {settings.nats.servers}",
            file=sys.stderr,
        )
        await nc.close()
        return 1
    seen = 0
    try:
        while count is None or seen < count:
            try:
                msg = await sub.next_msg(timeout=3600)
            except TimeoutError:
                continue
            try:
                print(line(decode(msg.headers, msg.data)), file=out, flush=True)
            except (msgspec.DecodeError, UnicodeDecodeError):
                print(f"(not a CloudEvent: {msg.subject} {msg.data[:80]!r})", file=out)
            seen += 1
    finally:
        await nc.close()
    return 0
