"""``k8s-event-bridge tail``: read the stream and print events as a person wants to read them."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any, NamedTuple, TextIO
from urllib.parse import unquote

import msgspec
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js.api import DeliverPolicy

from bridge.errors import NoStream
from bridge.jetstream import connection
from bridge.settings import NatsSettings, Settings


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


class Received(NamedTuple):
    subject: str
    headers: dict[str, str] | None
    data: bytes


class Tail:
    """The stream read in order by an ordered consumer: from its start, or from now on."""

    def __init__(self, nc: NATS, sub: Any, domain: str | None = None) -> None:
        self._nc = nc
        self._sub = sub
        self._domain = domain

    @classmethod
    async def open(cls, settings: NatsSettings, subject: str | None, *, from_start: bool) -> Tail:
        """Raises ``NoStream`` when the stream does not exist."""
        nc = await connection.connect(settings)
        policy = DeliverPolicy.ALL if from_start else DeliverPolicy.NEW
        try:
            sub = await nc.jetstream(domain=settings.domain).subscribe(
                subject or f"{settings.subject_prefix}.>",
                stream=settings.stream,
                ordered_consumer=True,
                deliver_policy=policy,
            )
        except nats.js.errors.NotFoundError:
            await nc.close()
            raise NoStream(f"no stream {settings.stream} on {settings.servers}") from None
        return cls(nc, sub, settings.domain)

    def __aiter__(self) -> AsyncIterator[Received]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Received]:
        while True:
            try:
                msg = await self._sub.next_msg(timeout=3600)
            except TimeoutError:
                continue
            yield Received(msg.subject, msg.headers, msg.data)

    async def stored(self, stream: str) -> int:
        """How many messages the stream holds now."""
        info = await self._nc.jetstream(domain=self._domain).stream_info(stream)
        return int(info.state.messages)

    async def close(self) -> None:
        await self._nc.close()


async def tail(
    settings: Settings,
    subject: str | None,
    *,
    all_: bool,
    count: int | None,
    out: TextIO = sys.stdout,
) -> int:
    """``k8s-event-bridge tail``: one readable line per message."""
    try:
        reader = await Tail.open(settings.nats, subject, from_start=all_)
    except NoStream as exc:
        print(f"k8s-event-bridge: {exc}", file=sys.stderr)
        return 1
    seen = 0
    try:
        if count is not None and count <= 0:
            return 0
        async for msg in reader:
            try:
                print(line(decode(msg.headers, msg.data)), file=out, flush=True)
            except (msgspec.DecodeError, UnicodeDecodeError):
                print(f"(not a CloudEvent: {msg.subject} {msg.data[:80]!r})", file=out)
            seen += 1
            if count is not None and seen >= count:
                break
    finally:
        await reader.close()
    return 0
