"""The remediation worker: Events from the stream → actions on the API server, each once.

For every Warning Event on a Pod of its cluster, the worker reads the Pod and its controllers,
asks ``rules.plan`` what to do, and does it:

1. the Pod is gone (or terminating), or its owner carries the annotations: done before (a
   count bump of the same Event, a redelivery, another replica); nothing more;
2. the same object had an action less than ``rate_limit`` ago: skipped;
3. its record, first: a Kubernetes Event named after the action's key, reason
   ``RemediationPodDeleted`` / ``RemediationMemorySuggested`` (``RemediationDryRun`` in a
   dry run), naming the CloudEvent that triggered it;
4. the action (``dryRun=All`` in a dry run); a Pod already gone or replaced counts as done.

Every step can be done again without doing more (a delete with the Pod's uid as precondition,
a merge patch of the same annotations, a create that meets 409), and the state of the object
says whether the action happened: a worker killed between two steps does the rest when the
message comes again. While the API server can not be reached
the message is held (``Retry``: nak'd with the ``hold`` delay) and tried again until it
answers, so nothing is lost and nothing is done twice.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from k8s_event_consumer import logs
from k8s_event_consumer.consuming import Delivery, Retry
from k8s_event_consumer.events import KubeEvent
from k8s_event_consumer.metrics import Metrics
from k8s_event_consumer.remediation import rules
from k8s_event_consumer.remediation.kube import Conflict, Kube, NotFound, Unavailable
from k8s_event_consumer.remediation.settings import Settings

log = logs.get("remediation")
METRICS_PREFIX = "k8s_event_remediation_"
COUNTERS = (
    (
        "actions_total",
        "actions, by action (delete_pod, suggest_memory) and result: acted, already_done, "
        "rate_limited, target_gone",
    ),
    ("held_total", "messages held (nak'd) because the API server could not be reached"),
    ("events_total", "Kubernetes Events read, by result: planned (an action) or ignored"),
)
UNLABELLED = ("held_total",)  # exported from 0 on
TRIGGER_ANNOTATION = "remediation.k8s-event-bridge.io/trigger"
KEY_ANNOTATION = "remediation.k8s-event-bridge.io/action"


@dataclass
class Counts:
    acted: int = 0
    already_done: int = 0
    rate_limited: int = 0
    held: int = 0
    ignored: int = 0
    by_action: dict[str, int] = field(default_factory=dict)


class Worker:
    def __init__(
        self,
        settings: Settings,
        kube: Kube,
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings = settings
        self.cfg = settings.remediation
        self.kube = kube
        self.clock = clock
        self.counts = Counts()
        self.metrics = metrics or Metrics(METRICS_PREFIX, COUNTERS, UNLABELLED)
        self._last_action: dict[str, float] = {}  # object uid → when
        self._instance = socket.gethostname()

    async def on_event(self, ev: KubeEvent, d: Delivery) -> None:
        if ev.cluster != self.settings.kubernetes.cluster or ev.involved.kind != "Pod":
            self._ignored()
            return
        try:
            await self._handle(ev)
        except Unavailable as exc:
            self.counts.held += 1
            self.metrics.inc("held_total")
            log.warning("held", id=ev.id, delivery=d.num_delivered, why=str(exc))
            raise Retry(self.cfg.hold, f"API server unavailable: {exc}") from exc

    async def _handle(self, ev: KubeEvent) -> None:
        if not ev.warning:
            self._ignored()
            return
        try:
            pod = await self.kube.get("v1", "Pod", ev.involved.namespace, ev.involved.name)
        except NotFound:
            self._ignored()
            log.debug("pod_gone", id=ev.id, pod=f"{ev.involved.namespace}/{ev.involved.name}")
            return
        owner = None
        if (
            self.cfg.memory.enabled
            and ev.reason in self.cfg.memory.reasons
            and (rules.oom_killed(pod) or ev.reason == "OOMKilling")
        ):
            try:
                owner = await self.kube.top_controller(pod)
            except NotFound:
                owner = None
        action = rules.plan(ev, pod, owner, self.cfg)
        if action is None:
            self._ignored()
            return
        self.metrics.inc("events_total", result="planned")
        await self._do(action, ev)

    async def _do(self, action: rules.Action, ev: KubeEvent) -> None:
        """The record first, then the action: a worker stopped between the two finds the
        record and the Pod still there (or the owner without the annotations) when the
        message comes again, and acts; stopped after the action, it finds the Pod gone (or
        the annotations there) and is done. Either way the action happens once."""
        dry = self.cfg.dry_run
        t = action.target
        record = action.record_name(dry)
        recorded = await self.kube.event_exists(t.namespace, record)
        if action.effect_present and not dry:
            if not recorded:
                await self._record(action, ev, record, dry)
            self._result(action, "already_done")
            log.info("already_done", key=action.key, id=ev.id, record=record)
            return
        if recorded:
            if dry:
                self._result(action, "already_done")
                log.info("already_done", key=action.key, id=ev.id, record=record)
                return
            log.info("resuming", key=action.key, id=ev.id, record=record)
        else:
            last = self._last_action.get(t.uid)
            now = self.clock()
            if last is not None and now - last < self.cfg.rate_limit:
                self._result(action, "rate_limited")
                log.info("rate_limited", key=action.key, id=ev.id, seconds_ago=round(now - last, 1))
                return
            self._acted_on(t.uid, now)
            await self._record(action, ev, record, dry)
        try:
            if action.kind == rules.DELETE_POD:
                await self.kube.delete_pod(t.namespace, t.name, t.uid, dry)
            else:
                await self.kube.annotate(
                    t.api_version, t.kind, t.namespace, t.name, t.uid, action.annotations, dry
                )
        except (NotFound, Conflict) as exc:
            # gone, or replaced by a new object of the same name: nothing left to act on
            self._result(action, "target_gone")
            log.info("target_gone", key=action.key, id=ev.id, detail=str(exc))
            return
        self._result(action, "acted")
        log.info(
            "acted",
            action=action.kind,
            key=action.key,
            target=f"{t.kind}/{t.namespace}/{t.name}",
            uid=t.uid,
            id=ev.id,
            dry_run=dry,
            why=action.why,
            annotations=action.annotations or None,
        )

    def _acted_on(self, uid: str, now: float) -> None:
        """Remember when ``uid`` was acted on; what is older than the rate limit is forgotten
        (bounded whatever the cluster does)."""
        if len(self._last_action) >= 1024:
            horizon = now - self.cfg.rate_limit
            self._last_action = {u: t for u, t in self._last_action.items() if t > horizon}
        self._last_action[uid] = now

    def _ignored(self) -> None:
        self.counts.ignored += 1
        self.metrics.inc("events_total", result="ignored")

    def _result(self, action: rules.Action, result: str) -> None:
        self.metrics.inc("actions_total", action=action.kind, result=result)
        if result == "acted":
            self.counts.acted += 1
            self.counts.by_action[action.kind] = self.counts.by_action.get(action.kind, 0) + 1
        elif result == "already_done":
            self.counts.already_done += 1
        elif result == "rate_limited":
            self.counts.rate_limited += 1

    async def _record(self, action: rules.Action, ev: KubeEvent, name: str, dry: bool) -> None:
        t = action.target
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if dry:
            reason, verb = "RemediationDryRun", "would"
        elif action.kind == rules.DELETE_POD:
            reason, verb = "RemediationPodDeleted", "did"
        else:
            reason, verb = "RemediationMemorySuggested", "did"
        what = (
            f"delete Pod {t.name}"
            if action.kind == rules.DELETE_POD
            else "annotate " + ", ".join(f"{k}={v}" for k, v in sorted(action.annotations.items()))
        )
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": name,
                "namespace": t.namespace,
                "annotations": {TRIGGER_ANNOTATION: ev.id, KEY_ANNOTATION: action.key},
            },
            "involvedObject": {
                "apiVersion": t.api_version,
                "kind": t.kind,
                "namespace": t.namespace,
                "name": t.name,
                "uid": t.uid,
            },
            "reason": reason,
            "message": f"k8s-event-remediation {verb} {what}: {action.why}",
            "type": "Normal",
            "source": {"component": self.cfg.component, "host": self._instance},
            "reportingComponent": self.cfg.component,
            "reportingInstance": self._instance,
            "action": action.kind,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.kube.create_event(t.namespace, body)
        except Conflict:
            pass  # recorded by an earlier attempt whose ack was lost
