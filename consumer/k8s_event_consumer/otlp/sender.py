"""OTLP/HTTP with protobuf: one ``ExportLogsServiceRequest`` POSTed to the endpoint's logs path
(``/v1/logs``), and its answer read as the OTLP specification says
(https://opentelemetry.io/docs/specs/otlp/#otlphttp-response):

- ``Accepted``: a 2xx with an ``ExportLogsServiceResponse`` (protobuf, or JSON from an
  endpoint that answers so) or an empty body; ``rejected`` records (its ``partial_success``)
  were refused for good, the others taken. A 2xx with anything else (a proxy's sign-in page)
  is ``Blocked``: nothing says the records were taken. Redirects are not followed (a 3xx is
  ``Blocked``): a POST turned into a GET of a sign-in page would read as taken, and the
  headers, tokens among them, would go to wherever the redirect points;
- ``Refused``: 400, 413 or 422: the request's records, for good (a record the endpoint can not
  take: too large, malformed, refused by a pipeline). The caller splits the batch to find the
  record. ``too_large`` when the request itself was too large: a 413, or a 400 whose reason
  says so (an OpenTelemetry Collector's, v0.139.0: its body read through Go's
  ``http.MaxBytesReader`` fails with ``http: request body too large``, which its OTLP receiver
  answers as a 400 with a ``google.rpc.Status`` of code 3 and that message); the caller then
  sends smaller requests (``sizing``);
- ``Unavailable``: 429, 502, 503, 504, a connection refused or reset, a timeout: try again,
  after ``retry_after`` when the endpoint said (``Retry-After``, seconds or an HTTP date);
- ``Failed``: 500: the endpoint failed on the request, for its records or for itself (an
  OpenTelemetry Collector answers a permanent error of its pipeline with 500, and any outage of
  what is behind it the same way). The caller splits it, and takes a record that fails alone as
  refused only once the endpoint took others meanwhile;
- ``Blocked``: any other answer (401, 403, 404, 405, 415, 501 ...): nothing wrong with the
  records, something with the endpoint or this subscriber's configuration of it; tried again,
  never split and never a dead letter (a wrong token must not send the stream to the
  dead-letter subject).

The reason of a refusal is the endpoint's own message: a ``google.rpc.Status`` (protobuf or
JSON, as the specification has it), else the body's text, cut to ``MAX_REASON`` characters.
"""

from __future__ import annotations

import email.utils
import gzip
import json
import re
import ssl
from dataclasses import dataclass
from typing import Any

import aiohttp
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

from k8s_event_common.clock import SYSTEM, Clock

PROTOBUF = "application/x-protobuf"
RETRYABLE = frozenset({429, 502, 503, 504})
REFUSED = frozenset({400, 413, 422})
MAX_REASON = 512
MAX_RETRY_AFTER = 600.0  # seconds: a larger Retry-After is taken as this
MAX_ANSWER = 64 * 1024  # bytes of an answer read: a partial success or a reason is far less
TOO_LARGE = 413
# what a 400 says when the request was too large: Go's http.MaxBytesError ("http: request body
# too large", an OpenTelemetry Collector's), "request entity too large", "payload too big" ...
_TOO_LARGE = re.compile(r"\btoo (?:large|big)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Accepted:
    rejected: int = 0
    message: str = ""


@dataclass(frozen=True)
class Refused:
    status: int
    reason: str
    too_large: bool = False  # the request, for its size (413, or a 400 that says so)


@dataclass(frozen=True)
class Unavailable:
    why: str
    retry_after: float | None = None


@dataclass(frozen=True)
class Failed:
    status: int
    reason: str


@dataclass(frozen=True)
class Blocked:
    status: int
    reason: str


Answer = Accepted | Refused | Unavailable | Failed | Blocked


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` in seconds (delta-seconds or an HTTP date), capped at
    ``MAX_RETRY_AFTER``; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # "²" is a digit to isdigit, not to float
        return min(float(value), MAX_RETRY_AFTER)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    wait = when.timestamp() - (SYSTEM.wall() if now is None else now)
    return min(max(wait, 0.0), MAX_RETRY_AFTER)


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def status_message(body: bytes) -> str:
    """The ``message`` (field 2) of a protobuf ``google.rpc.Status``; "" when it has none."""
    i = 0
    try:
        while i < len(body):
            tag, i = _varint(body, i)
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                _, i = _varint(body, i)
            elif wire == 2:
                n, i = _varint(body, i)
                if field == 2:
                    return body[i : i + n].decode("utf-8", "replace")
                i += n
            elif wire == 1:
                i += 8
            elif wire == 5:
                i += 4
            else:
                return ""
    except ValueError:
        return ""
    return ""


def reason(status: int, content_type: str, body: bytes) -> str:
    """What the endpoint said about a refusal, in one line."""
    text = ""
    if content_type.startswith(PROTOBUF):
        text = status_message(body)
    elif content_type.startswith("application/json"):
        try:
            doc = json.loads(body)
            text = str(doc.get("message", "")) if isinstance(doc, dict) else ""
        except ValueError:
            text = ""
    if not text:
        text = body.decode("utf-8", "replace")
    text = " ".join(text.split())
    return (f"HTTP {status}: {text}" if text else f"HTTP {status}")[:MAX_REASON]


def answer(status: int, headers: Any, body: bytes, now: float | None = None) -> Answer:
    """An HTTP answer to an export request, read as the module docstring says (``now``: the
    wall clock, for a ``Retry-After`` that is a date)."""
    content_type = str(headers.get("Content-Type", ""))
    if 200 <= status < 300:
        if not body:
            return Accepted()  # an empty ExportLogsServiceResponse: no partial success said
        if content_type.startswith(PROTOBUF):
            resp = ExportLogsServiceResponse()
            try:
                resp.ParseFromString(body)
            except DecodeError:
                return Blocked(
                    status, f"HTTP {status}: an answer that is no ExportLogsServiceResponse"
                )
            ps = resp.partial_success
            return Accepted(max(int(ps.rejected_log_records), 0), ps.error_message[:MAX_REASON])
        if content_type.startswith("application/json"):
            try:
                doc = json.loads(body)
                got: dict[str, Any] = doc.get("partialSuccess") or doc.get("partial_success") or {}
                rejected = int(
                    got.get("rejectedLogRecords") or got.get("rejected_log_records") or 0
                )
                message = str(got.get("errorMessage") or got.get("error_message") or "")
            except (ValueError, TypeError, AttributeError, OverflowError):  # 1e999: inf
                return Blocked(
                    status, f"HTTP {status}: an answer that is no ExportLogsServiceResponse"
                )
            return Accepted(max(rejected, 0), " ".join(message.split())[:MAX_REASON])
        return Blocked(status, f"HTTP {status}: a {content_type or 'typeless'} answer, not OTLP")
    if 300 <= status < 400:
        return Blocked(status, f"HTTP {status}: a redirect, not followed")
    if status in RETRYABLE:
        return Unavailable(
            reason(status, content_type, body), retry_after(headers.get("Retry-After"), now)
        )
    if status in REFUSED:
        why = reason(status, content_type, body)
        large = status == TOO_LARGE or (status == 400 and bool(_TOO_LARGE.search(why)))
        return Refused(status, why, large)
    if status == 500:
        return Failed(status, reason(status, content_type, body))
    return Blocked(status, reason(status, content_type, body))


class Client:
    """POSTs export requests to one endpoint (``url``: the full logs URL)."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        headers: dict[str, str] | None = None,
        compression: str = "gzip",
        ssl_context: ssl.SSLContext | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.url = url
        self.clock = clock
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._headers = {"Content-Type": PROTOBUF, **(headers or {})}
        if compression == "gzip":
            self._headers["Content-Encoding"] = "gzip"
        self._gzip = compression == "gzip"
        self._ssl = ssl_context
        self._session: aiohttp.ClientSession | None = None

    async def send(self, body: bytes) -> Answer:
        """One request; every failure to get an answer is ``Unavailable``."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        data = gzip.compress(body, compresslevel=5) if self._gzip else body
        try:
            async with self._session.post(
                self.url,
                data=data,
                headers=self._headers,
                ssl=self._ssl or True,
                allow_redirects=False,
            ) as resp:
                got = await resp.content.read(MAX_ANSWER)
                return answer(resp.status, resp.headers, got, self.clock.wall())
        except TimeoutError:
            return Unavailable(f"no answer within {self._timeout.total:g}s")
        except aiohttp.ClientError as exc:
            return Unavailable(f"{type(exc).__name__}: {exc}")
        except OSError as exc:
            return Unavailable(f"{type(exc).__name__}: {exc}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
