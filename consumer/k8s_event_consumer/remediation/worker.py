"""The remediation worker: Events from the stream → actions on the API server, each once, and
only on what the API server confirms.

A message is a claim, not a fact: anyone who may publish on the stream's subjects can write
one. For every Warning Event on a Pod of its cluster whose reason a rule takes, the worker
checks the claim before anything else:

- the message names the Pod's uid; every name in it is a Kubernetes name; the Event is in the
  Pod's namespace (the one rule, ``k8s_event_common.tenancy``: ``reference_untrusted``
  otherwise), one the worker may act in (``remediation.namespaces``: never kube-system,
  kube-public, kube-node-lease nor its own);
- the Event, read back by namespace and name, is the one the message describes: its uid, its
  reason, Warning, about that Pod (kind, namespace, name, uid); its count, not the message's,
  is what the restart rule compares;
- the Pod, read back, shows what the rule is for (``rules.plan``): a container waiting in
  CrashLoopBackOff with ``min_count`` restarts, or last terminated OOMKilled;
- the owner it annotates (the memory rule), or the controller that will make the Pod again
  (the restart rule's ``only_controlled``), is proven from the owner's side: the one owner walk
  (``k8s_event_common.owners.walk``, the bridge's enrichment uses it too) reads each controller
  the Pod's ownerReferences name, through ``Kube.get``, and counts it only when it exists with
  that uid, in the Pod's namespace and its kind's API group, and its selector selects the
  child. A Pod may name any Deployment of its namespace as its controller: that alone is
  ``owner_unproven``;
- for the memory rule, each OOMKilled container is what that owner's Pod template says: the
  same name, image, command, args and memory limit (``rules.not_as_template``). A Pod that
  names a real ReplicaSet and copies its labels, ``pod-template-hash`` too, is the
  ReplicaSet's by every proof (Kubernetes' ReplicaSet controller would count it), yet runs
  what its author wrote: its OOMKill is ``pod_not_as_template``.

A claim that fails is acked and never retried nor acted on, logged once as ``untrusted`` with
why (a fixed set: ``UNTRUSTED``), counted in ``untrusted_total{why}``, and its id is not
remembered as handled (``Discard``: a genuine message may carry the same id). An Event the API
server no longer has, last seen longer ago than its TTL, is ``stale``. Then, per action:

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
message comes again. While the API server can not be reached the message is held (``Retry``:
nak'd with the ``hold`` delay) and tried again until it answers, so nothing is lost, nothing
is done twice and nothing is done unconfirmed. An answer asking again will not change (403:
its RBAC does not reach that far; 422) ends the message with a log line (``refused``).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from k8s_event_common import owners
from k8s_event_common.clock import SYSTEM, Clock
from k8s_event_consumer import logs
from k8s_event_consumer.consuming import Delivery, Discard, Retry
from k8s_event_consumer.events import KubeEvent
from k8s_event_consumer.metrics import Counter, Metrics
from k8s_event_consumer.remediation import rules
from k8s_event_consumer.remediation.kube import (
    Conflict,
    Invalid,
    Kube,
    NotFound,
    Refused,
    Unavailable,
    name_problem,
    namespace_problem,
)
from k8s_event_consumer.remediation.settings import Settings

log = logs.get("remediation")
METRICS_PREFIX = "k8s_event_remediation_"
# why a message is untrusted: the only values of untrusted_total's label
UNTRUSTED = (
    "no_involved_uid",  # the message names no Pod uid
    "bad_name",  # a namespace or name that is not a Kubernetes name
    "namespace_denied",  # a namespace the worker may not act in
    # a Pod the Event's namespace may not name (k8s_event_common.tenancy: another namespace's)
    "reference_untrusted",
    "event_not_found",  # the API server has no such Event (and it is not past its TTL)
    "event_mismatch",  # the Event it has is not the one the message describes
    "count_not_confirmed",  # the Event's count is below the rule's
    "pod_not_crash_looping",  # no container of the Pod restarted min_count times
    "pod_not_oom_killed",  # an OOMKilling on a Pod none of whose containers was OOMKilled
    "owner_unproven",  # the controller the Pod names does not claim it (owners.walk's why)
    # an OOMKilled container not as its proven owner's Pod template has it (name, image,
    # command, args, memory limit): a Pod that copies a ReplicaSet's labels runs what its
    # author wrote
    "pod_not_as_template",
)
# the controllers the owner walk reads (deploy/consumers/remediation-rbac.yaml grants get)
OWNER_KINDS = frozenset(owners.CLAIMS)
COUNTERS = (
    Counter(
        "actions_total",
        "actions, by action (delete_pod, suggest_memory) and result: acted, already_done, "
        "rate_limited, target_gone",
        ("action", "result"),
        tuple(
            (action, result)
            for action in (rules.DELETE_POD, rules.SUGGEST_MEMORY)
            for result in ("acted", "already_done", "rate_limited", "target_gone")
        ),
    ),
    Counter("held_total", "messages held (nak'd) because the API server could not be reached"),
    Counter.by(
        "events_total",
        "Kubernetes Events read, by result: planned (an action), ignored, stale (the API "
        "server no longer has the Event) or refused (the API server refused a read or an "
        "action for good)",
        "result",
        ("planned", "ignored", "stale", "refused"),
    ),
    Counter.by(
        "untrusted_total",
        "messages the API server did not confirm, never acted on, by why: "
        "no_involved_uid, bad_name, namespace_denied, reference_untrusted, event_not_found, "
        "event_mismatch, "
        "count_not_confirmed, pod_not_crash_looping, pod_not_oom_killed, owner_unproven, "
        "pod_not_as_template",
        "why",
        UNTRUSTED,
    ),
    Counter.by(
        "owner_unproven_total",
        "controllers a Pod names that the owner walk did not prove (each also an "
        "untrusted_total{why=owner_unproven}), by why: kind, group, namespace, invalid, "
        "notfound, uid, unclaimed, depth",
        "why",
        sorted(owners.UNPROVEN),
    ),
)
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
LAST_ACTIONS = 4096  # objects whose last action the rate limit remembers, at most
TRIGGER_ANNOTATION = "remediation.k8s-event-bridge.io/trigger"
KEY_ANNOTATION = "remediation.k8s-event-bridge.io/action"


@dataclass
class Counts:
    acted: int = 0
    already_done: int = 0
    rate_limited: int = 0
    held: int = 0
    ignored: int = 0
    untrusted: int = 0
    stale: int = 0
    refused: int = 0
    by_action: dict[str, int] = field(default_factory=dict)


class Untrusted(Exception):
    """The API server does not confirm what the message says (``why``: one of UNTRUSTED)."""

    def __init__(self, why: str, detail: str, proof: str | None = None) -> None:
        assert why in UNTRUSTED, why
        super().__init__(detail)
        self.why = why
        self.proof = proof  # owner_unproven: owners.walk's reason code


class _Stale(Exception):
    """The Event is no longer on the API server, deleted by its TTL."""


class _NotNow(Exception):
    """Genuine, but nothing to do about it (the Pod is gone, replaced, between two crashes)."""


def own_namespace() -> str | None:
    """The worker's own namespace: $POD_NAMESPACE, else its service account's (in a Pod)."""
    ns = os.environ.get("POD_NAMESPACE", "").strip()
    if ns:
        return ns
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


class Worker:
    def __init__(
        self,
        settings: Settings,
        kube: Kube,
        clock: Clock = SYSTEM,
        metrics: Metrics | None = None,
        namespace: str | None = None,
    ) -> None:
        self.settings = settings
        self.cfg = settings.remediation
        self.kube = kube
        self.clock = clock
        self.counts = Counts()
        self.metrics = metrics or Metrics(METRICS_PREFIX, COUNTERS)
        self._last_action: dict[str, float] = {}  # object uid → when
        self._instance = socket.gethostname()
        ns = self.cfg.namespaces
        self.allowed = frozenset(ns.allow)
        self.denied = frozenset(ns.deny) | {namespace or own_namespace() or ""} - {""}

    def may_act_in(self, namespace: str) -> bool:
        return namespace not in self.denied and (not self.allowed or namespace in self.allowed)

    async def on_event(self, ev: KubeEvent, d: Delivery) -> None:
        if (
            ev.cluster != self.settings.kubernetes.cluster
            or ev.involved.kind != "Pod"
            or not ev.warning
            or not self._wanted(ev.reason, ev.count)
        ):
            self._ignored()
            return
        try:
            await self._handle(ev)
        except Invalid as exc:  # a name from an answer (an owner reference): refused too
            raise self._untrusted(ev, d, Untrusted("bad_name", str(exc))) from exc
        except Untrusted as u:
            raise self._untrusted(ev, d, u) from u
        except _Stale as exc:
            self.counts.stale += 1
            self.metrics.inc("events_total", result="stale")
            log.info("stale", id=ev.id, detail=str(exc))
        except _NotNow as exc:
            self._ignored()
            log.info("nothing_to_do", id=ev.id, detail=str(exc))
        except Unavailable as exc:
            self.counts.held += 1
            self.metrics.inc("held_total")
            log.warning("held", id=ev.id, delivery=d.num_delivered, why=str(exc))
            raise Retry(self.cfg.hold, f"API server unavailable: {exc}") from exc
        except Refused as exc:
            # asking again changes nothing (403: beyond its RBAC; 422): the message ends here
            self.counts.refused += 1
            self.metrics.inc("events_total", result="refused")
            log.error("refused", id=ev.id, error=str(exc)[:500])

    def _untrusted(self, ev: KubeEvent, d: Delivery, u: Untrusted) -> Discard:
        """Count and log an untrusted message once; the Discard that acks it."""
        self.counts.untrusted += 1
        self.metrics.inc("untrusted_total", why=u.why)
        log.warning(
            "untrusted",
            id=ev.id[:200],
            why=u.why,
            detail=str(u)[:500],
            delivery=d.num_delivered,
            stream_sequence=d.stream_sequence,
            proof=u.proof,
        )
        return Discard(u.why)

    def _wanted(self, reason: str, count: int) -> bool:
        """A rule takes Events of this reason (and, for the restart rule, this count): a
        cheap look at the message before any request."""
        rst, mem = self.cfg.restart, self.cfg.memory
        return (rst.enabled and reason in rst.reasons and count >= rst.min_count) or (
            mem.enabled and reason in mem.reasons
        )

    async def _handle(self, ev: KubeEvent) -> None:
        inv = ev.involved
        if not inv.uid:
            raise Untrusted("no_involved_uid", "the message names no involvedObject uid")
        # the one rule (k8s_event_common.tenancy), and the worker acts only on a Pod that names
        # the Event's namespace itself (not one implied)
        judged = ev.tenancy.involved
        if not judged.trusted or inv.namespace != judged.namespace:
            raise Untrusted(
                "reference_untrusted",
                f"the Event is in namespace {ev.namespace[:63]!r}, its Pod in "
                f"{inv.namespace[:63]!r}: {judged.why}",
            )
        problem = (
            namespace_problem(ev.namespace)
            or name_problem(ev.name)
            or namespace_problem(inv.namespace)
            or name_problem(inv.name)
        )
        if problem:
            raise Untrusted("bad_name", problem)
        if not self.may_act_in(inv.namespace):
            raise Untrusted("namespace_denied", f"the worker may not act in {inv.namespace}")
        try:
            real = await self.kube.get("v1", "Event", ev.namespace, ev.name)
        except NotFound:
            self._missing(ev)
            raise
        confirmed = self._confirm(ev, real)
        try:
            pod = await self.kube.get("v1", "Pod", inv.namespace, inv.name)
        except NotFound as exc:
            raise _NotNow(f"Pod {inv.namespace}/{inv.name} is gone") from exc
        if (pod.get("metadata") or {}).get("uid") != inv.uid:
            raise _NotNow(f"Pod {inv.namespace}/{inv.name} is another Pod now")
        owner = None
        rst, mem = self.cfg.restart, self.cfg.memory
        oom = rules.oom_killed(pod)
        if mem.enabled and confirmed.reason in mem.reasons and oom:
            owner = await self._proven_owner(pod)
            problem = rules.not_as_template(pod, owner, oom) if owner is not None else ""
            if problem:
                raise Untrusted("pod_not_as_template", f"Pod {inv.namespace}/{inv.name}: {problem}")
        elif rst.enabled and confirmed.reason in rst.reasons and ev.count >= rst.min_count:
            if confirmed.count < rst.min_count:
                raise Untrusted(
                    "count_not_confirmed",
                    f"the Event's count is {confirmed.count}, the message says {ev.count}, "
                    f"the rule wants {rst.min_count}",
                )
            if not rules.restarted(pod, rst.min_count):
                raise Untrusted(
                    "pod_not_crash_looping",
                    f"no container of Pod {inv.namespace}/{inv.name} restarted "
                    f"{rst.min_count} times",
                )
            if not rules.crash_looping(pod, rst.min_count):
                raise _NotNow(f"Pod {inv.namespace}/{inv.name} is not in CrashLoopBackOff now")
            if rst.only_controlled:
                owner = await self._proven_owner(pod)
        elif confirmed.reason == "OOMKilling":
            raise Untrusted(
                "pod_not_oom_killed",
                f"no container of Pod {inv.namespace}/{inv.name} was OOMKilled",
            )
        action = rules.plan(confirmed, pod, owner, self.cfg)
        if action is None:
            self._ignored()
            return
        self.metrics.inc("events_total", result="planned")
        await self._do(action, ev)

    async def _proven_owner(self, pod: dict[str, Any]) -> tuple[dict[str, Any], str, str] | None:
        """The Pod's top controller (object, apiVersion, kind), every link proven by
        ``owners.walk`` from what ``Kube.get`` reads (or the farthest proven, when the next
        controller is of a kind the walk does not read); None when the Pod has no controller.
        Untrusted (``owner_unproven``) when a link is not proven; a read the API server
        refuses is ``Refused``, one it can not answer ``Unavailable`` (held)."""
        read: dict[tuple[str, str], dict[str, Any]] = {}
        walk = owners.walk(owners.facts("Pod", pod), OWNER_KINDS)
        try:
            want = next(walk)
            while True:
                sent: owners.Facts | str
                try:
                    obj = await self.kube.get(
                        owners.KINDS[want.kind].api_version, want.kind, want.namespace, want.name
                    )
                except NotFound:
                    sent = owners.NOTFOUND
                except Invalid:
                    sent = owners.INVALID
                else:
                    read[(want.kind, want.name)] = obj
                    sent = owners.facts(want.kind, obj)
                want = walk.send(sent)
        except StopIteration as done:
            walked: owners.Owners = done.value
        meta = pod.get("metadata") or {}
        # a proven chain that ends below a controller of a kind the walk does not read (an
        # operator's custom resource controlling a Deployment): its farthest owner proven is
        # the one the worker may act on; nothing proven (the Pod's own controller such a
        # kind) is not
        beyond = walked.why in (owners.KIND, owners.GROUP) and walked.top is not None
        if not walked.proven and not beyond:
            self.metrics.inc("owner_unproven_total", why=walked.why)
            raise Untrusted(
                "owner_unproven",
                f"Pod {meta.get('namespace')}/{meta.get('name')}: {walked.detail}",
                proof=walked.why,
            )
        top = walked.top
        if top is None:
            return None
        return read[(top.kind, top.name)], owners.KINDS[top.kind].api_version, top.kind

    def _confirm(self, ev: KubeEvent, real: dict[str, Any]) -> KubeEvent:
        """The message's Event as the API server has it, if it is the same Event about the
        same Pod; else Untrusted."""
        meta = real.get("metadata") or {}
        involved = real.get("involvedObject") or {}
        series = real.get("series") or {}
        inv = ev.involved
        for what, have, claimed in (
            ("uid", meta.get("uid"), ev.uid),
            ("reason", real.get("reason"), ev.reason),
            ("type", real.get("type"), "Warning"),
            ("involvedObject.kind", involved.get("kind"), "Pod"),
            ("involvedObject.namespace", involved.get("namespace") or ev.namespace, inv.namespace),
            ("involvedObject.name", involved.get("name"), inv.name),
            ("involvedObject.uid", involved.get("uid"), inv.uid),
        ):
            if have != claimed:
                raise Untrusted(
                    "event_mismatch",
                    f"Event {ev.namespace}/{ev.name}: the API server has {what} "
                    f"{str(have)[:80]!r}, the message {str(claimed)[:80]!r}",
                )
        count = series.get("count") if series else real.get("count")
        count = count if isinstance(count, int) and not isinstance(count, bool) else 1
        return dataclasses.replace(ev, reason=str(real.get("reason")), count=count)

    def _missing(self, ev: KubeEvent) -> NoReturn:
        """The API server has no Event of that name: stale when the message says it was last
        seen longer ago than the Event TTL, else never there."""
        ttl = self.settings.kubernetes.event_ttl
        seen = ev.last_seen or ev.first_seen
        if seen is not None and (self.clock.utcnow() - seen).total_seconds() > ttl:
            raise _Stale(f"Event {ev.namespace}/{ev.name} is gone, last seen {seen.isoformat()}")
        raise Untrusted(
            "event_not_found",
            f"the API server has no Event {ev.namespace}/{ev.name}, last seen "
            f"{seen.isoformat() if seen else 'never'} by the message",
        )

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
            now = self.clock.monotonic()
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
            owner=action.owner or None,
        )

    def _acted_on(self, uid: str, now: float) -> None:
        """Remember when ``uid`` was acted on, newest last; what is older than the rate limit
        is forgotten, and beyond ``LAST_ACTIONS`` objects the oldest (bounded whatever the
        cluster does: the rate limit then holds for the last ``LAST_ACTIONS`` objects)."""
        last = self._last_action
        last.pop(uid, None)
        last[uid] = now
        horizon = now - self.cfg.rate_limit
        while last:
            oldest = next(iter(last))
            if len(last) <= LAST_ACTIONS and last[oldest] > horizon:
                break
            del last[oldest]

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
        now = self.clock.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
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
