"""A NATS message ready to publish, and the state of one on its way to JetStream.

``Message`` is what the converter makes: subject, payload and the header block encoded once.
``Outgoing`` is what travels from the intake through the queue to the publisher: the message,
its place in the progress ledger, and its publish attempts.
"""

from __future__ import annotations

from typing import Final

from bridge.core.progress import Entry
from bridge.errors import ConversionError

MSG_ID_HEADER: Final = "Nats-Msg-Id"

_HEAD_LINE: Final = b"NATS/1.0\r\n"


def encode_headers(headers: dict[str, str]) -> bytes:
    """The NATS header block (``NATS/1.0``, ``Key: value`` lines, blank line).

    Keys must be header tokens and values one line: a CR or LF would end the block early and
    corrupt the protocol, so either is refused here, not sent.
    """
    parts = [_HEAD_LINE]
    for k, v in headers.items():
        if not k or not k.isascii() or not k.isprintable() or ":" in k or " " in k:
            raise ConversionError(f"header name {k!r} is not a token")
        if "\r" in v or "\n" in v:
            raise ConversionError(f"header {k} value has a line break")
        parts.append(f"{k}: {v}\r\n".encode())
    parts.append(b"\r\n")
    return b"".join(parts)


class Message:
    """One NATS message ready to publish: subject, payload and its encoded header block."""

    __slots__ = ("head", "msg_id", "payload", "subject")

    def __init__(
        self,
        subject: str,
        payload: bytes,
        headers: dict[str, str] | None,
        msg_id: str,
        *,
        head: bytes | None = None,
    ) -> None:
        self.subject = subject
        self.payload = payload
        self.msg_id = msg_id
        self.head = head if head is not None else encode_headers(headers or {})

    @property
    def headers(self) -> dict[str, str]:
        """The header block as a dict (for tests and the plain publish path)."""
        out: dict[str, str] = {}
        for line in self.head.decode().split("\r\n")[1:]:
            if line:
                k, _, v = line.partition(": ")
                out[k] = v
        return out

    @property
    def wire_size(self) -> int:
        """Bytes the server counts against max_payload: header block plus payload."""
        return len(self.head) + len(self.payload)

    def __repr__(self) -> str:
        return f"Message({self.subject!r}, {len(self.payload)} bytes, id={self.msg_id!r})"


class Outgoing:
    """A message on its way: queued, then in flight until the first ack of any attempt.

    Every attempt carries the same reply token, so a message costs the same whether JetStream
    answers its first attempt or its hundredth: nothing per attempt outlives the attempt.
    """

    __slots__ = ("attempts", "deadline", "entry", "first_sent", "msg", "notice", "settled", "token")

    def __init__(self, msg: Message, entry: Entry | None) -> None:
        self.msg = msg
        self.entry = entry  # None for status events that move no checkpoint
        self.token = ""  # the reply token of all its attempts, given when it is first sent
        self.deadline = 0.0
        self.first_sent = 0.0
        self.attempts = 0
        self.settled = False
        self.notice = False  # a `dropped` status event: never itself the subject of one
