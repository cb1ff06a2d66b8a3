"""What reached the stream, read back from outside, as an independent client: every message of
a stream (``stream_messages``) and the message ids of the Events among them (``event_ids``).
The tests, the benchmark and the soak compare these with what was written."""

from __future__ import annotations

import nats

__all__ = ["event_ids", "stream_messages"]


async def stream_messages(
    nats_url: str,
    stream: str = "K8S_EVENTS",
    subject: str = "k8s.events.>",
    *,
    headers_only: bool = False,
    timeout: float = 1.0,
) -> list[tuple[str, dict[str, str], bytes]]:
    """Every message in the stream: (subject, headers, body; empty with ``headers_only``), as
    many as it held when asked; it stops early when none comes for ``timeout`` seconds."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        out: list[tuple[str, dict[str, str], bytes]] = []
        if info.state.messages:
            sub = await js.subscribe(
                subject, stream=stream, ordered_consumer=True, headers_only=headers_only
            )
            while True:
                try:
                    m = await sub.next_msg(timeout=timeout)
                except (TimeoutError, nats.errors.TimeoutError):
                    break
                out.append((m.subject, dict(m.headers or {}), m.data))
                if len(out) >= info.state.messages:
                    break
            await sub.unsubscribe()
        return out
    finally:
        await nc.close()


async def event_ids(nats_url: str) -> list[str]:
    """The Nats-Msg-Id of every Event message (status events left out)."""
    messages = await stream_messages(nats_url, headers_only=True)
    return [h["Nats-Msg-Id"] for s, h, _ in messages if "._bridge." not in s]
