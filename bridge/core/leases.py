"""Leader election on a ``coordination.k8s.io/v1`` Lease: the decisions of client-go's
``tryAcquireOrRenew``, pure. ``bridge.runtime.leading.Elector`` does the requests and keeps
the time.

Expiry is judged on the local monotonic clock, never on the Lease's own timestamps (clocks of
two Pods differ): a Lease whose record has not changed for ``leaseDurationSeconds`` since this
process first saw it that way has expired. An empty ``holderIdentity`` is a released Lease:
free at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


def micro_time(epoch: float) -> str:
    """Kubernetes' MicroTime: RFC 3339 with exactly six fractional digits, in UTC."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    duration: int  # leaseDurationSeconds
    acquire_time: str | None
    renew_time: str | None
    transitions: int

    @classmethod
    def of(cls, lease: dict[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        duration = spec.get("leaseDurationSeconds")
        transitions = spec.get("leaseTransitions")
        return cls(
            holder if isinstance(holder, str) else "",
            duration if isinstance(duration, int) and duration > 0 else 0,
            spec.get("acquireTime") if isinstance(spec.get("acquireTime"), str) else None,
            spec.get("renewTime") if isinstance(spec.get("renewTime"), str) else None,
            transitions if isinstance(transitions, int) and transitions >= 0 else 0,
        )

    def spec(self) -> dict[str, Any]:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


def held_by_other(record: LeaseRecord, me: str, observed_at: float, now: float) -> bool:
    """Someone else holds it and it has not expired (seen unchanged for less than its
    duration)."""
    return bool(record.holder) and record.holder != me and observed_at + record.duration > now


def claimed(record: LeaseRecord | None, me: str, duration: int, now_epoch: float) -> LeaseRecord:
    """The record this process writes to take or keep the Lease."""
    at = micro_time(now_epoch)
    if record is not None and record.holder == me:
        return LeaseRecord(me, duration, record.acquire_time or at, at, record.transitions)
    transitions = 0 if record is None else record.transitions + 1  # as client-go counts
    return LeaseRecord(me, duration, at, at, transitions)


def released(record: LeaseRecord, now_epoch: float) -> LeaseRecord:
    """What a leader writes as it steps down (client-go's ReleaseOnCancel): nobody holds it,
    and it expires in a second for anyone still judging by the duration."""
    at = micro_time(now_epoch)
    return LeaseRecord("", 1, at, at, record.transitions)


def lease_object(
    name: str, namespace: str, record: LeaseRecord, resource_version: str | None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": record.spec(),
    }
