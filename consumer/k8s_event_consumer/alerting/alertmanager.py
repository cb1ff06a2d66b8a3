"""The Alertmanager boundary: alerts POSTed to ``/api/v2/alerts`` of every Alertmanager, and
read back from there at start. The only user of aiohttp's client in the subscriber.

As Prometheus does, every Alertmanager of an HA cluster gets every alert (they gossip
silences and notifications, not alerts). A send has succeeded when at least one Alertmanager
took it: the others get it from the resend loop when they are back. When none takes it,
``NotDelivered`` is raised and the message that made the alert is held and delivered again.

Bounded in bytes both ways: a send POSTs bodies of at most ``MAX_POST_ALERTS`` alerts and
``MAX_POST_BYTES`` bytes (one alert alone always goes: the alerts are capped, so it is small),
each encoded as it goes; an answer's body is read ``MAX_ERROR_BYTES`` at most; the alerts read
back at start come one at a time from the body as it streams in (``MAX_ITEM_BYTES`` an alert at
most), never the whole list in memory.

Errors::

    AlertmanagerError
     ├── Unavailable    one Alertmanager did not answer in time, refused the connection, or
     │                  answered 408, 429 or 5xx: retried, then reported
     ├── Rejected       one Alertmanager answered another 4xx: the alerts are wrong for it
     │                  (retrying can not help; a bug or a proxy in the way)
     └── NotDelivered   no Alertmanager took the alerts

aiohttp's and the socket's exceptions are mapped to these in ``_post`` and ``_get`` only.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import json
import ssl
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

import aiohttp

from k8s_event_common.clock import SYSTEM
from k8s_event_consumer.alerting.alerts import Alert, AlertName, rfc3339
from k8s_event_consumer.events import parse_time

API: Final = "/api/v2/alerts"
_RETRIABLE_STATUS: Final = frozenset({408, 429})
MAX_POST_ALERTS: Final = 256  # alerts per POST at most (Prometheus sends up to 256)
MAX_POST_BYTES: Final = 1024 * 1024  # bytes per POST body at most (one alert alone may be more)
MAX_ERROR_BYTES: Final = 1024  # of an answer's body read, for the error's text (300 shown)
MAX_ITEM_BYTES: Final = 256 * 1024  # one alert of GET /api/v2/alerts, as JSON, at most
READ_CHUNK: Final = 64 * 1024


class AlertmanagerError(Exception):
    """Something went wrong talking to Alertmanager; the text names which one and how."""


class Unavailable(AlertmanagerError):
    pass


class Rejected(AlertmanagerError):
    pass


class NotDelivered(AlertmanagerError):
    def __init__(self, failures: Mapping[str, AlertmanagerError]) -> None:
        super().__init__(
            "no Alertmanager took the alerts: "
            + "; ".join(f"{url}: {exc}" for url, exc in failures.items())
        )
        self.failures = dict(failures)


@dataclass(frozen=True)
class Auth:
    """Basic auth, or a bearer token (``bearer_token_file`` is read again on every request,
    so a rotated token is picked up)."""

    user: str | None = None
    password: str | None = field(default=None, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    bearer_token_file: str | None = None

    def headers(self) -> dict[str, str]:
        token = self.bearer_token
        if self.bearer_token_file:
            token = Path(self.bearer_token_file).read_text(encoding="utf-8").strip()
        if token:
            return {"Authorization": f"Bearer {token}"}
        if self.user:
            pair = f"{self.user}:{self.password or ''}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
        return {}


@dataclass
class Outcome:
    """What one send did: the Alertmanagers that took the alerts (every body of them), and the
    others' errors (the last one each)."""

    delivered: list[str] = field(default_factory=list)
    failed: dict[str, AlertmanagerError] = field(default_factory=dict)

    @property
    def rejected(self) -> dict[str, Rejected]:
        return {u: e for u, e in self.failed.items() if isinstance(e, Rejected)}


def postable(alert: Alert, now: datetime, horizon: timedelta) -> dict[str, Any]:
    """An alert as ``POST /api/v2/alerts`` takes it. An alert that fires until resolved gets
    ``endsAt = now + horizon`` on every send, as Prometheus does: Alertmanager resolves it by
    itself if the sends stop (the subscriber gone for longer than the horizon)."""
    ends = alert.ends_at if alert.ends_at is not None else now + horizon
    return {
        "labels": dict(alert.labels),
        "annotations": dict(alert.annotations),
        "startsAt": rfc3339(alert.starts_at),
        "endsAt": rfc3339(max(ends, alert.starts_at)),
        "generatorURL": alert.generator_url,
    }


def bodies(
    alerts: Iterable[Alert],
    now: datetime,
    horizon: timedelta,
    max_alerts: int = MAX_POST_ALERTS,
    max_bytes: int = MAX_POST_BYTES,
) -> Iterator[bytes]:
    """``alerts`` as POST bodies of at most ``max_alerts`` alerts and ``max_bytes`` bytes (an
    alert larger than that alone in its body), each encoded when its body is made."""
    parts: list[bytes] = []
    size = 2
    for alert in alerts:
        part = json.dumps(postable(alert, now, horizon)).encode()
        if parts and (len(parts) == max_alerts or size + len(part) + 1 > max_bytes):
            yield b"[" + b",".join(parts) + b"]"
            parts, size = [], 2
        parts.append(part)
        size += len(part) + 1
    if parts:
        yield b"[" + b",".join(parts) + b"]"


def parse(item: Mapping[str, Any]) -> Alert:
    """One alert of ``GET /api/v2/alerts`` (a gettableAlert)."""
    starts = parse_time(item.get("startsAt"))
    if starts is None:
        raise ValueError("startsAt missing")
    return Alert(
        labels={str(k): str(v) for k, v in (item.get("labels") or {}).items()},
        annotations={str(k): str(v) for k, v in (item.get("annotations") or {}).items()},
        starts_at=starts,
        ends_at=parse_time(item.get("endsAt")),
        generator_url=str(item.get("generatorURL") or ""),
    )


class Client:
    """Every configured Alertmanager, through one aiohttp session."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        timeout: float = 10.0,
        attempts: int = 3,
        retry_backoff: float = 0.5,
        horizon: timedelta = timedelta(minutes=4),
        auth: Auth = Auth(),
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], datetime] = SYSTEM.utcnow,
        sleep: Callable[[float], Awaitable[None]] = SYSTEM.sleep,
    ) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._attempts = attempts
        self._backoff = retry_backoff
        self._horizon = horizon
        self._auth = auth
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._clock = clock
        self._sleep = sleep
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def send(self, alerts: Sequence[Alert]) -> Outcome:
        """POST ``alerts`` to every Alertmanager (each body retried up to ``attempts`` times),
        in bodies bounded in alerts and bytes (``bodies``). Raises ``NotDelivered`` when no
        Alertmanager took a body (the rest is not tried); a ``Rejected`` one is reported in the
        outcome, not raised: sending it again would only be refused again."""
        outcome = Outcome()
        if not alerts:
            return outcome
        for body in bodies(alerts, self._clock(), self._horizon):
            results = await asyncio.gather(*(self._post_retrying(url, body) for url in self.urls))
            failed = {url: e for url, e in zip(self.urls, results, strict=True) if e is not None}
            outcome.failed.update(failed)
            rejected = [e for e in failed.values() if isinstance(e, Rejected)]
            if len(failed) == len(self.urls) and len(rejected) < len(self.urls):
                raise NotDelivered(failed)
        outcome.delivered = [url for url in self.urls if url not in outcome.failed]
        return outcome

    async def _post_retrying(self, url: str, body: bytes) -> AlertmanagerError | None:
        delay = self._backoff
        for attempt in range(1, self._attempts + 1):
            try:
                await self._post(url, body)
                return None
            except Rejected as exc:
                return exc
            except Unavailable as exc:
                if attempt == self._attempts:
                    return exc
            await self._sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    async def _post(self, url: str, body: bytes) -> None:
        try:
            headers = {"Content-Type": "application/json", **self._auth.headers()}
            async with self._client().post(
                url + API, data=body, headers=headers, ssl=self._ssl
            ) as r:
                if r.status == 200:
                    return
                text = await _head(r)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise Unavailable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc
        if r.status >= 500 or r.status in _RETRIABLE_STATUS:
            raise Unavailable(f"HTTP {r.status}: {text}")
        raise Rejected(f"HTTP {r.status}: {text}")

    async def alerts(self, url: str) -> AsyncIterator[Alert]:
        """The alerts of this subscriber's names one Alertmanager shows (not resolved), one at
        a time as its answer streams in: an item of the answer that is no alert is passed over;
        an answer that is no list of alerts, or an item over ``MAX_ITEM_BYTES``, raises
        ``Rejected`` (what came before it was given)."""
        names = "|".join(n.value for n in AlertName)
        params = [
            ("active", "true"),
            ("silenced", "true"),
            ("inhibited", "true"),
            ("unprocessed", "true"),
            ("filter", f'alertname=~"{names}"'),
        ]
        try:
            headers = self._auth.headers()
            async with self._client().get(
                url + API, params=params, headers=headers, ssl=self._ssl
            ) as r:
                if r.status != 200:
                    text = await _head(r)
                    retriable = r.status >= 500 or r.status in _RETRIABLE_STATUS
                    cls = Unavailable if retriable else Rejected
                    raise cls(f"GET {API}: HTTP {r.status}: {text}")
                try:
                    async for item in items(r.content, MAX_ITEM_BYTES):
                        try:
                            yield parse(item)
                        except (ValueError, TypeError, AttributeError):
                            continue  # not an alert of this shape
                except ValueError as exc:
                    raise Rejected(f"GET {API}: not a list of alerts: {exc}") from exc
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise Unavailable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc


async def _head(r: aiohttp.ClientResponse) -> str:
    """The start of an answer's body, for an error's text: never the whole of it."""
    return (await r.content.read(MAX_ERROR_BYTES)).decode("utf-8", "replace")[:300]


async def items(content: aiohttp.StreamReader, max_item: int) -> AsyncIterator[Any]:
    """The items of the JSON array ``content`` streams, one at a time as they come: what is in
    memory is one item (``max_item`` characters at most, else a ``ValueError``) and a chunk.
    A ``ValueError`` too when the body is no JSON array."""
    text = codecs.getincrementaldecoder("utf-8")("replace")
    decode = json.JSONDecoder().raw_decode
    buf, pos, opened = "", 0, False
    async for chunk in content.iter_chunked(READ_CHUNK):
        buf = buf[pos:] + text.decode(chunk)
        pos = 0
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n,":
                if buf[pos] == "," and not opened:
                    raise ValueError("no JSON array")
                pos += 1
            if pos == len(buf):
                break
            if not opened:
                if buf[pos] != "[":
                    raise ValueError("no JSON array")
                opened, pos = True, pos + 1
                continue
            if buf[pos] == "]":
                return
            try:
                item, end = decode(buf, pos)
            except json.JSONDecodeError:
                if len(buf) - pos > max_item:
                    raise ValueError(f"an item over {max_item} characters") from None
                break  # the rest of it comes with the next chunk
            yield item
            pos = end
    raise ValueError("the array does not end")
