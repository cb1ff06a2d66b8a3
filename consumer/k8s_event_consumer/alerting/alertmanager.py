"""The Alertmanager boundary: alerts POSTed to ``/api/v2/alerts`` of every Alertmanager, and
read back from there at start. The only user of aiohttp's client in the subscriber.

As Prometheus does, every Alertmanager of an HA cluster gets every alert (they gossip
silences and notifications, not alerts). A send has succeeded when at least one Alertmanager
took it: the others get it from the resend loop when they are back. When none takes it,
``NotDelivered`` is raised and the message that made the alert is held and delivered again.

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
import json
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

import aiohttp

from k8s_event_consumer.alerting.alerts import Alert, AlertName, rfc3339, utcnow
from k8s_event_consumer.events import parse_time

API: Final = "/api/v2/alerts"
_RETRIABLE_STATUS: Final = frozenset({408, 429})


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
    """What one send did: the Alertmanagers that took the alerts, and the others' errors."""

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
        clock: Callable[[], datetime] = utcnow,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
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
        """POST ``alerts`` to every Alertmanager (each retried up to ``attempts`` times).
        Raises ``NotDelivered`` when none took them; a ``Rejected`` one is reported in the
        outcome, not raised: sending it again would only be refused again."""
        outcome = Outcome()
        if not alerts:
            return outcome
        now = self._clock()
        body = json.dumps([postable(a, now, self._horizon) for a in alerts]).encode()
        results = await asyncio.gather(*(self._post_retrying(url, body) for url in self.urls))
        for url, error in zip(self.urls, results, strict=True):
            if error is None:
                outcome.delivered.append(url)
            else:
                outcome.failed[url] = error
        if not outcome.delivered and len(outcome.rejected) < len(self.urls):
            raise NotDelivered(outcome.failed)
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
                text = (await r.text())[:300]
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise Unavailable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc
        if r.status >= 500 or r.status in _RETRIABLE_STATUS:
            raise Unavailable(f"HTTP {r.status}: {text}")
        raise Rejected(f"HTTP {r.status}: {text}")

    async def alerts(self, url: str) -> list[Alert]:
        """The alerts of this subscriber's names one Alertmanager shows (not resolved)."""
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
                text = await r.text()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise Unavailable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc
        if r.status != 200:
            cls = Unavailable if r.status >= 500 or r.status in _RETRIABLE_STATUS else Rejected
            raise cls(f"GET {API}: HTTP {r.status}: {text[:300]}")
        try:
            items = json.loads(text)
            return [parse(item) for item in items]
        except (ValueError, TypeError, AttributeError) as exc:
            raise Rejected(f"GET {API}: not a list of alerts: {exc}") from exc
