"""Leader election on a Lease, as client-go's ``leaderelection`` does it (the seeds'
informer-with-LeaderElection pattern): ``LeaseDuration`` 15 s, ``RenewDeadline`` 10 s,
``RetryPeriod`` 2 s by default (``leader_election``).

- ``acquire()`` tries every retry period (jittered) until this process holds the Lease.
- ``hold()`` renews every retry period and returns (``LeadershipLost``) once no renewal has
  succeeded for ``renew_deadline``: each attempt is cut off at that deadline, so a hung API
  server can not keep a leader that no longer holds the Lease. The caller stops at once.
- ``release()`` hands the Lease back on a clean stop (client-go's ReleaseOnCancel), so the
  standby takes over at its next attempt, not a lease duration later.

The decisions are ``bridge.core.leases``'; the requests go through the ``LeaseStore`` port.
Expiry is judged on the local monotonic clock (``core.leases.held_by_other``).

Why not ``kubernetes_asyncio.leaderelection`` (read at 36.1.0): it has no release (and its
``LeaseLock`` refuses an empty holder), no deadline on a request in flight (a hung API server
keeps a deposed leader leading), the wall clock for expiry, an exception from the client
(a refused connection) escapes ``run()`` and leaves the leader's work running, float
durations crash (``int("15.0")``), timestamps are naive local time suffixed "Z", and
``leaseTransitions`` never moves. client-go's algorithm is small; it is here, tested on an
injected clock (tests/unit/test_leading.py) and against the real API server (tests/e2e).
"""

from __future__ import annotations

from typing import Any, Protocol

from bridge import errors, logs
from bridge.core.leases import LeaseRecord, claimed, held_by_other, lease_object, released
from bridge.settings import LeaderElectionSettings
from k8s_event_common.clock import SYSTEM, Clock

log = logs.get("leading")

JITTER = 1.2  # client-go's JitterFactor: the acquire loop waits 1 to 2.2 retry periods


class LeaseStore(Protocol):
    """The Kubernetes side (``bridge.kube.client.KubeClient``). Raises ``errors.KubeError``:
    ``Conflict`` when someone else wrote the Lease first."""

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def create_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]: ...

    async def replace_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]: ...


class LeadershipLost(Exception):
    """No renewal succeeded for ``renew_deadline``: stop reading, publish nothing more."""


class Elector:
    def __init__(
        self,
        store: LeaseStore,
        settings: LeaderElectionSettings,
        *,
        identity: str,
        namespace: str,
        clock: Clock = SYSTEM,
    ) -> None:
        self.store = store
        self.settings = settings
        self.identity = identity
        self.namespace = namespace
        self.name = settings.lease_name
        self.lease = f"{namespace}/{self.name}"  # for people: logs, /status, leader_changed
        self.duration = max(1, round(settings.lease_duration))
        self._clock = clock
        self._observed: LeaseRecord | None = None
        self._observed_raw: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._resource_version: str | None = None
        self.leading = False
        self.renewed_at: float | None = None
        # what the Lease said when this process took it (for the leader_changed event)
        self.previous_holder = ""

    @property
    def holder(self) -> str:
        """Who holds the Lease, as last seen ("" when nobody or unknown)."""
        return self._observed.holder if self._observed is not None else ""

    @property
    def transitions(self) -> int:
        return self._observed.transitions if self._observed is not None else 0

    async def acquire(self) -> None:
        """Return once this process holds the Lease."""
        period = self.settings.retry_period
        while not await self._try(timeout=period):
            await self._clock.sleep(period * (1 + JITTER * self._clock.random()))
        self.leading = True
        log.info(
            "leading",
            identity=self.identity,
            lease=self.lease,
            previous_holder=self.previous_holder or None,
            transitions=self.transitions,
        )

    async def hold(self) -> None:
        """Renew until a renewal is ``renew_deadline`` late; then raise ``LeadershipLost``."""
        s = self.settings
        assert self.renewed_at is not None
        while True:
            await self._clock.sleep(s.retry_period)
            while True:
                left = self.renewed_at + s.renew_deadline - self._clock.monotonic()
                if left <= 0:
                    self.leading = False
                    log.error(
                        "leadership_lost",
                        identity=self.identity,
                        lease=self.lease,
                        holder=self.holder or None,
                        note=f"no renewal for {s.renew_deadline:g}s: stopping at once",
                    )
                    raise LeadershipLost(f"no renewal of the Lease for {s.renew_deadline:g}s")
                if await self._try(timeout=left):
                    break
                await self._clock.sleep(min(s.retry_period, max(0.0, left)))

    async def release(self) -> None:
        """Hand the Lease back (on a clean stop), if this process still holds it."""
        if not self.leading:
            return
        self.leading = False
        deadline = self.settings.renew_deadline
        try:
            async with self._clock.timeout(deadline):
                while True:
                    raw = await self.store.get_lease(self.namespace, self.name)
                    if raw is None or LeaseRecord.of(raw).holder != self.identity:
                        return
                    record = released(LeaseRecord.of(raw), self._clock.wall())
                    rv = (raw.get("metadata") or {}).get("resourceVersion")
                    try:
                        await self.store.replace_lease(
                            self.namespace, lease_object(self.name, self.namespace, record, rv)
                        )
                    except errors.Conflict:
                        continue
                    log.info("lease_released", identity=self.identity)
                    return
        except (TimeoutError, errors.KubeError) as exc:
            log.warning(
                "lease_release_failed",
                error=str(exc) or type(exc).__name__,
                note="the standby takes over when the lease expires",
            )

    async def _try(self, *, timeout: float) -> bool:
        """One tryAcquireOrRenew, cut off after ``timeout`` seconds."""
        try:
            async with self._clock.timeout(timeout):
                return await self._try_acquire_or_renew()
        except TimeoutError:
            log.warning("lease_request_timed_out", identity=self.identity, seconds=timeout)
        except errors.Conflict:
            pass  # someone else wrote it first: not ours this time
        except errors.KubeError as exc:
            log.warn_sampled(
                "lease_error",
                "lease_request_failed",
                interval=30,
                identity=self.identity,
                lease=self.lease,
                error=type(exc).__name__,
                detail=str(exc)[:300],
                needs="get, create and update on leases (coordination.k8s.io) in " + self.namespace
                if isinstance(exc, errors.Forbidden)
                else None,
            )
        return False

    async def _try_acquire_or_renew(self) -> bool:
        now = self._clock.monotonic()
        raw = await self.store.get_lease(self.namespace, self.name)
        if raw is None:
            record = claimed(None, self.identity, self.duration, self._clock.wall())
            made = await self.store.create_lease(
                self.namespace, lease_object(self.name, self.namespace, record, None)
            )
            self._took(made, previous="", at=now)
            return True
        spec = raw.get("spec")
        if spec != self._observed_raw:
            self._observed_raw = spec
            self._observed = LeaseRecord.of(raw)
            self._observed_at = now
        current = self._observed
        assert current is not None
        if held_by_other(current, self.identity, self._observed_at, now):
            self.leading = False
            return False
        record = claimed(current, self.identity, self.duration, self._clock.wall())
        rv = (raw.get("metadata") or {}).get("resourceVersion")
        written = await self.store.replace_lease(
            self.namespace, lease_object(self.name, self.namespace, record, rv)
        )
        self._took(written, previous=current.holder, at=now)
        return True

    def _took(self, lease: dict[str, Any], *, previous: str, at: float) -> None:
        """Written: this process holds the Lease as of ``at``, when the attempt began (the
        renew deadline counts from there, so it never outlasts what others see)."""
        if not self.leading:
            self.previous_holder = previous if previous != self.identity else ""
        self._observed_raw = lease.get("spec")
        self._observed = LeaseRecord.of(lease)
        self._observed_at = at
        self.renewed_at = at
