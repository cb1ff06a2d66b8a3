"""A real OpenTelemetry Collector for the OTLP subscriber's tests, and its output read back.

The binary comes from ``e2e/build-otelcol.sh`` (the OpenTelemetry Collector Builder, from the
Go module proxy, cached outside the repo and keyed by ``OTELCOL_VERSION`` in
``e2e/versions.env``: receivers ``otlp`` and ``k8s_events``, exporters ``file`` and
``debug``); a test module that starts one names it in ``GO_TOOLS = ("otelcol",)``.

:class:`Collector` runs it with a generated config: the OTLP receiver over HTTP on a free
loopback port (gRPC too when asked), every log record to a ``file`` exporter that writes one
JSON line per request (``otlp.jsonl``), and the ``debug`` exporter (one line per request in
the collector's log). With :class:`K8sEvents` it also runs contrib's ``k8s_events`` receiver
against a kubeconfig, in a pipeline of its own to a file of its own (``k8s_events.jsonl``),
so the subscriber's records and the receiver's stay apart. ``records()`` reads the first,
``k8s_event_records()`` the second, as flat :data:`Record` dicts (:func:`parse`).

What the real collector does (v0.139.0, read in its source; docs/e2e.md):

- A 200 means the records reached the file exporter's buffer, not the disk: the exporter
  flushes every ``flush_interval`` (here 100 ms unless told; its own default is 1 s) and at a
  clean stop. ``kill()`` (SIGKILL) loses what was not flushed, and can leave a torn last line
  (a line longer than what the 4 KiB buffer has room for goes out in pieces) or a whole line
  without its newline (written apart): :func:`parse` counts the first and reads on, reads the
  second. So a test waits for a record to be *in the file* before it kills.
- A body over ``max_request_body_size`` is read up to the limit and refused: 400 with a
  ``google.rpc.Status`` (code 3, ``http: request body too large``), nothing consumed.
- A failing exporter is a retryable error to the receiver: with ``disk_full`` (the file
  exporter writes to /dev/full) a request is answered 503 with a ``google.rpc.Status`` code 14
  (Unavailable) and no Retry-After. Not at once: a request smaller than the buffer's room is
  buffered and answered 200 (and lost); the first failed write (a flush, or a request that
  does not fit) sticks, and every request after it is answered 503. ``restart()`` after
  ``disk_full = False`` writes to the file again.
- ``pause()`` (SIGSTOP) leaves the listening socket to the kernel: a connection is accepted
  into the backlog and never answered, so the client's own timeout ends the request;
  ``resume()`` (SIGCONT) answers what was waiting, and writes a request whose client timed
  out meanwhile (a retry of it is a duplicate).
- The ``k8s_events`` receiver sends only Events whose timestamp (eventTime, else
  lastTimestamp, else firstTimestamp) is not before its own start, and lastTimestamp counts
  whole seconds: an Event written in the second the collector started is dropped (measured).
  ``k8s_events_from`` is the first time surely sent.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

import aiohttp
import yaml

from tests.standins import gotools
from tests.support import eventually, eventually_sync, free_port


class CollectorError(RuntimeError):
    """The collector could not be built, started or read."""


def ensure_otelcol() -> Path:
    """The otelcol binary, built with e2e/build-otelcol.sh when it is missing
    (tests/standins/gotools.py: one attempt per process, a failed build fails every later call)."""
    try:
        return gotools.ensure("otelcol")
    except gotools.ToolError as exc:
        raise CollectorError(str(exc)) from exc


# --- the file exporter's output ------------------------------------------------------------


class Record(TypedDict):
    """One log record, flattened: what the resource, the scope and the record itself say.

    Attribute values are decoded from OTLP's AnyValue (:func:`any_value`); the times are
    integers (nanoseconds since the epoch; 0 when unset, as OTLP reads an unset time).
    ``event_name`` is None when the record has none (OTLP's ``eventName``, field 12)."""

    resource: dict[str, Any]
    scope: dict[str, Any]  # name, version, attributes
    attributes: dict[str, Any]
    body: Any
    severity_number: int
    severity_text: str
    time_unix_nano: int
    observed_time_unix_nano: int
    event_name: str | None
    trace_id: str
    span_id: str
    flags: int
    dropped_attributes_count: int


@dataclass
class Parsed:
    """What a file exporter's output holds: the records in order, ``requests`` the whole
    requests (JSON objects) read, ``torn`` the writes cut short (by a SIGKILL) skipped."""

    records: list[Record] = field(default_factory=list)
    requests: int = 0
    torn: int = 0


def any_value(value: dict[str, Any]) -> Any:
    """OTLP's AnyValue in its JSON form (protojson: int64 as a string, bytes as base64) as a
    Python value: str, int, bool, float, bytes, list, dict; an empty AnyValue is None."""
    if not value:
        return None
    ((kind, v),) = value.items()
    match kind:
        case "stringValue":
            return v
        case "intValue":
            return int(v)
        case "boolValue":
            return bool(v)
        case "doubleValue":
            return float(v)  # "NaN", "Infinity" arrive as strings
        case "bytesValue":
            return base64.b64decode(v)
        case "arrayValue":
            return [any_value(item) for item in v.get("values", [])]
        case "kvlistValue":
            return attributes(v.get("values", []))
    raise CollectorError(f"unknown AnyValue kind {kind!r} in {value!r}")


def attributes(pairs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A list of OTLP KeyValue (``{"key": ..., "value": AnyValue}``) as a dict."""
    return {kv["key"]: any_value(kv.get("value", {})) for kv in pairs}


def records_of(request: dict[str, Any]) -> list[Record]:
    """The log records of one ExportLogsServiceRequest in its JSON form (one line of the
    file exporter), in order: resourceLogs, then scopeLogs, then logRecords."""
    out: list[Record] = []
    for rl in request.get("resourceLogs", []):
        resource = attributes(rl.get("resource", {}).get("attributes", []))
        for sl in rl.get("scopeLogs", []):
            s = sl.get("scope", {})
            scope = {
                "name": s.get("name", ""),
                "version": s.get("version", ""),
                "attributes": attributes(s.get("attributes", [])),
            }
            for lr in sl.get("logRecords", []):
                out.append(
                    Record(
                        resource=resource,
                        scope=scope,
                        attributes=attributes(lr.get("attributes", [])),
                        body=any_value(lr.get("body", {})),
                        severity_number=int(lr.get("severityNumber", 0)),
                        severity_text=lr.get("severityText", ""),
                        time_unix_nano=int(lr.get("timeUnixNano", 0)),
                        observed_time_unix_nano=int(lr.get("observedTimeUnixNano", 0)),
                        event_name=lr.get("eventName") or None,
                        trace_id=lr.get("traceId", ""),
                        span_id=lr.get("spanId", ""),
                        flags=int(lr.get("flags", 0)),
                        dropped_attributes_count=int(lr.get("droppedAttributesCount", 0)),
                    )
                )
    return out


# where a request's JSON begins: what follows a torn write on the same line after a restart
# (the next write appends right after the torn bytes, which end with no newline)
_START = '{"resourceLogs"'
_DECODER = json.JSONDecoder()


def parse(text: str) -> Parsed:
    """The file exporter's output (``format: json``: one ExportLogsServiceRequest per line).

    What a SIGKILL leaves is read too: a request cut short counts as torn and what follows it
    on the same line is read (the restarted collector appended there); a whole request whose
    newline was lost (the exporter writes the newline apart, into its buffer) is read with the
    request that follows it on the same line."""
    parsed = Parsed()
    for line in text.splitlines():
        at = 0
        while at < len(line):
            if line[at].isspace():
                at += 1
                continue
            try:
                request, at = _DECODER.raw_decode(line, at)
            except json.JSONDecodeError:
                parsed.torn += 1
                at = line.find(_START, at + 1)
                if at == -1:
                    break
                continue
            parsed.requests += 1
            parsed.records.extend(records_of(request))
    return parsed


def read(path: Path) -> Parsed:
    """:func:`parse` of a file; an empty result when it does not exist yet."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Parsed()
    return parse(data.decode("utf-8", errors="replace"))


# --- the process ----------------------------------------------------------------------------


@dataclass(frozen=True)
class K8sEvents:
    """Contrib's ``k8s_events`` receiver: the API server of ``kubeconfig`` (auth_type
    kubeConfig, read through ``KUBECONFIG``), the Events of ``namespaces`` (all when empty)."""

    kubeconfig: Path
    namespaces: tuple[str, ...] = ()
    context: str = ""


def config(
    *,
    port: int,
    output: Path,
    max_request_body_size: int | None = None,
    grpc_port: int | None = None,
    flush_interval: str = "100ms",
    k8s_events: K8sEvents | None = None,
    k8s_events_output: Path | None = None,
    debug_verbosity: str | None = "basic",
) -> dict[str, Any]:
    """The collector's config: OTLP (HTTP on loopback ``port``, gRPC on ``grpc_port`` when
    given) to the file ``output`` (appended to: a restart keeps what was written) and to the
    debug exporter (left out when ``debug_verbosity`` is None: the benchmark measures the
    collector without it); with ``k8s_events``, that receiver to ``k8s_events_output`` in a
    pipeline of its own. No telemetry of its own on a port (``metrics: level: none``), so
    collectors side by side do not fight over 8888."""
    http: dict[str, Any] = {"endpoint": f"127.0.0.1:{port}"}
    if max_request_body_size is not None:
        http["max_request_body_size"] = max_request_body_size
    protocols: dict[str, Any] = {"http": http}
    if grpc_port is not None:
        protocols["grpc"] = {"endpoint": f"127.0.0.1:{grpc_port}"}
    receivers: dict[str, Any] = {"otlp": {"protocols": protocols}}
    exporters: dict[str, Any] = {
        "file/otlp": {"path": str(output), "append": True, "flush_interval": flush_interval},
    }
    debug = [] if debug_verbosity is None else ["debug"]
    if debug:
        exporters["debug"] = {"verbosity": debug_verbosity}
    pipelines: dict[str, Any] = {
        "logs/otlp": {"receivers": ["otlp"], "exporters": ["file/otlp", *debug]},
    }
    if k8s_events is not None:
        if k8s_events_output is None:
            raise CollectorError("k8s_events needs an output file of its own")
        receiver: dict[str, Any] = {"auth_type": "kubeConfig"}
        if k8s_events.namespaces:
            receiver["namespaces"] = list(k8s_events.namespaces)
        if k8s_events.context:
            receiver["context"] = k8s_events.context
        receivers["k8s_events"] = receiver
        exporters["file/k8s_events"] = {
            "path": str(k8s_events_output),
            "append": True,
            "flush_interval": flush_interval,
        }
        pipelines["logs/k8s_events"] = {
            "receivers": ["k8s_events"],
            "exporters": ["file/k8s_events", *debug],
        }
    return {
        "receivers": receivers,
        "exporters": exporters,
        "service": {
            "telemetry": {"logs": {"level": "info"}, "metrics": {"level": "none"}},
            "pipelines": pipelines,
        },
    }


def stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (state T in /proc; Linux)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            stat = (task / "stat").read_text()
            states.append(stat[stat.rindex(")") + 2])  # the field after "(comm)"
    return bool(states) and all(state in "Tt" for state in states)


@dataclass
class Collector:
    """``otelcol`` as a real child process, its OTLP/HTTP receiver on a free loopback port.

    ``restart()`` keeps the port, the config and the output files (appended to)."""

    workdir: Path
    max_request_body_size: int | None = None
    grpc: bool = False
    k8s_events: K8sEvents | None = None
    flush_interval: str = "100ms"
    # the OTLP pipeline's file exporter writes to /dev/full (no space left on device) instead
    # of ``output``, which keeps what it holds: the receiver then answers 503 (see disk_full)
    disk_full: bool = False
    # the debug exporter's verbosity; None: no debug exporter (what the benchmark measures)
    debug_verbosity: str | None = "basic"
    binary: Path = field(default_factory=ensure_otelcol)
    port: int = field(default_factory=free_port)
    grpc_port: int | None = None
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    # wall-clock time (time.time()) of the last launch and of the last time it was ready
    launched_at: float = 0.0
    ready_at: float = 0.0

    def __post_init__(self) -> None:
        if self.grpc and self.grpc_port is None:
            self.grpc_port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def logs_url(self) -> str:
        """Where OTLP/HTTP log records go (``POST``, ``application/x-protobuf``)."""
        return f"{self.url}/v1/logs"

    @property
    def output(self) -> Path:
        return self.workdir / "otlp.jsonl"

    @property
    def k8s_events_output(self) -> Path:
        return self.workdir / "k8s_events.jsonl"

    @property
    def log_path(self) -> Path:
        return self.workdir / "otelcol.log"

    @property
    def config_path(self) -> Path:
        return self.workdir / "otelcol.yaml"

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _full(self) -> Path:
        """A path that is /dev/full, for ``disk_full``."""
        full = self.workdir / "full.jsonl"
        if not full.is_symlink():
            full.symlink_to("/dev/full")
        return full

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def start(self, timeout: float = 30.0) -> Collector:
        """Start (or start again: same port, same files) and wait until it answers HTTP."""
        self.launch()
        await self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Start the process (``start`` also waits until it answers)."""
        if self.running():
            raise CollectorError("the collector is running already")
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg = config(
            port=self.port,
            output=self._full() if self.disk_full else self.output,
            max_request_body_size=self.max_request_body_size,
            grpc_port=self.grpc_port,
            flush_interval=self.flush_interval,
            k8s_events=self.k8s_events,
            k8s_events_output=self.k8s_events_output,
            debug_verbosity=self.debug_verbosity,
        )
        self.config_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        if self.k8s_events is not None:
            env["KUBECONFIG"] = str(self.k8s_events.kubeconfig)
        self.launched_at = time.time()
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [str(self.binary), f"--config={self.config_path}"],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        self.paused = False

    async def wait_ready(self, timeout: float = 30.0) -> None:
        """Until the OTLP/HTTP port answers (``GET /v1/logs``: 405, from the receiver's own
        handler; the receivers start after the exporters, so the pipeline is whole by then).
        CollectorError with the log's tail if the process exits first or is not ready in
        ``timeout`` seconds."""
        async with aiohttp.ClientSession() as s:

            async def ready() -> bool:
                if not self.running():
                    code = self.proc.returncode if self.proc is not None else None
                    raise CollectorError(f"otelcol exited {code}:\n{self.logs()[-3000:]}")
                async with s.get(self.logs_url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    return r.status == 405

            await eventually(
                ready,
                timeout,
                what="otelcol answering OTLP/HTTP",
                retry_on=(TimeoutError, aiohttp.ClientError),
                error=lambda message: CollectorError(f"{message}:\n{self.logs()[-3000:]}"),
            )
        self.ready_at = time.time()

    @property
    def k8s_events_from(self) -> datetime:
        """The ``k8s_events`` receiver sends an Event whose timestamp (eventTime, else
        lastTimestamp, else firstTimestamp) is not before its own start, which falls between
        ``launched_at`` and ``ready_at``: an Event stamped at or after this time (the first
        whole second after ready, as lastTimestamp counts whole seconds) is sent for sure, one
        stamped before ``launched_at`` never, one between maybe."""
        return datetime.fromtimestamp(math.ceil(self.ready_at), tz=UTC)

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Stop it (SIGTERM: a clean stop that flushes the files; SIGKILL: a crash) and wait
        for the exit; its exit status (None when it was not running)."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(sig)
            if self.paused and sig != signal.SIGKILL:
                proc.send_signal(signal.SIGCONT)  # a stopped process acts on SIGTERM once woken
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.paused = False
        return proc.returncode

    def kill(self) -> int | None:
        """SIGKILL: what was not flushed to the files is lost, a last line may be torn."""
        return self.stop(signal.SIGKILL)

    async def restart(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> Collector:
        """Stop (``sig``) and start again on the same port, appending to the same files."""
        self.stop(sig)
        return await self.start(timeout)

    def pause(self) -> None:
        """SIGSTOP, and wait until every thread is stopped (the signal only asks; a request
        sent at once could still be answered): the collector is frozen, its socket still
        accepts connections (the kernel queues them), nothing answers until :meth:`resume`."""
        if not self.running():
            raise CollectorError("the collector is not running")
        assert self.proc is not None
        pid = self.proc.pid
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True
        eventually_sync(lambda: stopped(pid), 10, what=f"otelcol (pid {pid}) stopped")

    def resume(self) -> None:
        """SIGCONT: the frozen collector goes on, answering what waited."""
        if self.proc is not None and self.paused:
            pid = self.proc.pid
            self.proc.send_signal(signal.SIGCONT)
            eventually_sync(lambda: not stopped(pid), 10, what=f"otelcol (pid {pid}) running")
        self.paused = False

    def read(self) -> Parsed:
        """The OTLP pipeline's file so far (what was flushed), with its torn line count."""
        return read(self.output)

    def records(self) -> list[Record]:
        """The OTLP pipeline's records so far, in the order written."""
        return self.read().records

    def k8s_event_records(self) -> list[Record]:
        """The ``k8s_events`` receiver's records so far, in the order written."""
        return read(self.k8s_events_output).records
