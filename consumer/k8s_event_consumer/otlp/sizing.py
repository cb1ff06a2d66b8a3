"""The size limit of an export request in effect (``RequestLimit``): ``otlp.max_request_bytes``,
lowered when the endpoint says a request was too large, kept, and raised again slowly.

An endpoint may take less than the subscriber is configured to send: an OpenTelemetry
Collector's ``max_request_body_size`` limits the decompressed body as well as the compressed
one (confighttp v0.139.0, ``compression.go``: the decompressor wraps the decoded body in
``http.MaxBytesReader`` with the same limit), so 100 KB of protobuf that gzip makes 154 bytes
is refused by a collector limited to 64 KiB: 400, ``http: request body too large``, nothing of
it taken. Told so (``sender.Refused.too_large``: a 413, or a 400 that says it), the shipper
sends the request's records again in smaller requests, and the next batches too:

- **lowered** to half the refused request's size (its protobuf, before compression), but not
  under the largest request the endpoint took (that one passed): halving, then bisecting
  between what passed and what did not; never under ``FLOOR``. Only a request of several
  records teaches this: a record refused alone as too large is that record's fault (a dead
  letter once there is proof the endpoint takes others), and lowers nothing;
- **kept** for every later batch, as long as the process lives (a restart learns again, at
  the cost of a few refused requests);
- **raised** again slowly: after ``PROBE_AFTER`` taken requests that the limit shaped (at
  least half its size), half-way up to the smallest request refused, until within
  ``CLOSE`` of it; with no refusal remembered (none yet, or forgotten after ``FORGET_AFTER``
  shaped requests taken, so that a collector given a larger limit is found again) it doubles,
  up to the configured limit. A probe that fails costs one refused request, which took
  nothing: no duplicate. Why probe at all: halving leaves requests at up to half of what the
  endpoint takes (twice the requests for the same records), and one refusal of the moment
  (a proxy being reconfigured) would otherwise shrink them until the next restart.
"""

from __future__ import annotations

FLOOR = 1024  # bytes: the least limit (the least otlp.max_request_bytes)
PROBE_AFTER = 32  # shaped requests taken before the limit is raised a step
FORGET_AFTER = 1024  # shaped requests taken before the smallest refused one is forgotten
CLOSE = 16  # no more bisecting once the gap to what was refused is under 1/CLOSE of the limit


class RequestLimit:
    """``value``: the most bytes of protobuf a request of several records may have now."""

    def __init__(self, configured: int) -> None:
        self.configured = configured
        self.value = configured
        self.refused_at: int | None = None  # the smallest request refused as too large
        self.passed = 0  # the largest request taken
        self._shaped = 0  # shaped requests taken since the last change of the limit
        self._since_refused = 0  # shaped requests taken since the last refusal

    def refused(self, size: int) -> int | None:
        """A request of several records, ``size`` bytes, refused as too large: the new
        limit, or None when it stays (a request sent at the floor)."""
        if self.passed >= size:  # it took as much before: the endpoint's limit went down
            self.passed = 0
        self.refused_at = size if self.refused_at is None else min(self.refused_at, size)
        self._since_refused = 0
        return self._set(min(self.value, max(size // 2, self.passed, FLOOR)))

    def taken(self, size: int) -> int | None:
        """A request of ``size`` bytes taken: the new limit when it was the one that makes
        the limit probe upward, else None."""
        self.passed = max(self.passed, size)
        if self.value >= self.configured or 2 * size < self.value:
            return None  # nothing to probe for, or a request the limit did not shape
        self._shaped += 1
        self._since_refused += 1
        if self.refused_at is not None and self._since_refused >= FORGET_AFTER:
            self.refused_at = None
        if self._shaped < PROBE_AFTER:
            return None
        if self.refused_at is None:
            return self._set(min(self.configured, 2 * self.value))
        if self.refused_at - self.value <= self.value // CLOSE:
            return None  # as close to what was refused as it is worth
        return self._set((self.value + self.refused_at) // 2)

    def _set(self, new: int) -> int | None:
        if new == self.value:
            return None
        self.value = new
        self._shaped = 0
        return new
