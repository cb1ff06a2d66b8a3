"""What the worker does about an Event: pure decisions, no I/O.

``plan(ev, pod, owner, cfg)`` looks at a Warning Event on a Pod, both as the API server has
them now (the worker read them back: a message's word is not enough), and returns at most one
``Action``:

- a container of the Pod was OOMKilled (its last termination): annotate the Pod's top
  controller, proven from the owner's side, with a memory limit ``factor`` times the current
  one under ``annotation_key`` (deleting the Pod would not help: it would be killed again);
- else a ``BackOff`` (or a configured reason) whose count reached ``min_count``, on a Pod a
  container of which waits in ``CrashLoopBackOff`` with at least ``min_count`` restarts
  (``crash_looping``): delete the Pod, so its controller makes a new one.

Each action has a ``key``: the action, the object's uid and its generation (a Pod) or what it
suggests (an owner, whose generation the annotation itself bumps). The same key is the same
action (a count bump of the Event that triggered it, a redelivery): done once. The record of
it is a Kubernetes Event named after the key (``record_name``).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import Any

from k8s_event_consumer.events import KubeEvent
from k8s_event_consumer.remediation import settings
from k8s_event_consumer.remediation.settings import RemediationSettings

DELETE_POD = "delete_pod"
SUGGEST_MEMORY = "suggest_memory"

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([KMGTPE]i?|[kmMGTPE]|e[0-9]+)?$")
_UNITS = {
    "": 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "m": 10**-3,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def memory_bytes(quantity: str) -> int:
    """A Kubernetes quantity (``128Mi``, ``1G``, ``500000000``) in bytes. Raises ValueError."""
    m = _QUANTITY.match(quantity.strip())
    if not m:
        raise ValueError(f"{quantity!r} is not a Kubernetes quantity")
    number, suffix = float(m[1]), m[2] or ""
    scale = 10 ** int(suffix[1:]) if suffix.startswith("e") else _UNITS[suffix]
    return math.ceil(number * scale)


def suggest(quantity: str, factor: float) -> str:
    """``factor`` times ``quantity``, rounded up to a whole MiB: ``128Mi`` x1.5 → ``192Mi``."""
    mib = math.ceil(memory_bytes(quantity) * factor / 2**20)
    return f"{mib}Mi"


@dataclass(frozen=True)
class Target:
    """The object an action changes."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    generation: int = 0


@dataclass(frozen=True)
class Action:
    kind: str  # DELETE_POD or SUGGEST_MEMORY
    target: Target
    why: str
    annotations: dict[str, str] = field(default_factory=dict)  # SUGGEST_MEMORY's
    # its effect is already there (the owner carries these annotations): only its record,
    # if missing, is left to write
    effect_present: bool = False
    owner: str = ""  # the Pod's top controller proven, kind/namespace/name ("": none)

    @property
    def key(self) -> str:
        """One action, whatever triggered it: a Pod's deletion by its uid and generation; a
        suggestion by its owner's uid and what it suggests (not the owner's generation:
        annotating a Deployment bumps it, the worker's own patch would make a new key)."""
        if self.kind == SUGGEST_MEMORY:
            what = ",".join(f"{k}={v}" for k, v in sorted(self.annotations.items()))
            digest = hashlib.sha256(what.encode()).hexdigest()[:12]
            return f"{self.kind}/{self.target.uid}/{digest}"
        return f"{self.kind}/{self.target.uid}/{self.target.generation}"

    def record_name(self, dry_run: bool) -> str:
        """The name of the Event that records it (a dry run has its own)."""
        digest = hashlib.sha256(f"{self.key}/{dry_run}".encode()).hexdigest()[:16]
        return f"{self.target.name[:200]}.remediation.{digest}"


def target_of(obj: dict[str, Any], api_version: str, kind: str) -> Target:
    meta = obj.get("metadata") or {}
    return Target(
        api_version=api_version,
        kind=kind,
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        generation=int(meta.get("generation") or 0),
    )


def owner_name(owner: tuple[dict[str, Any], str, str] | None) -> str:
    """kind/namespace/name of an owner (object, apiVersion, kind); "" for none."""
    if owner is None:
        return ""
    meta = owner[0].get("metadata") or {}
    return f"{owner[2]}/{meta.get('namespace', '')}/{meta.get('name', '')}"


def oom_killed(pod: dict[str, Any]) -> list[str]:
    """The containers of ``pod`` whose last termination was OOMKilled."""
    out = []
    for st in _statuses(pod):
        last = (st.get("lastState") or {}).get("terminated") or {}
        now = (st.get("state") or {}).get("terminated") or {}
        if "OOMKilled" in (last.get("reason"), now.get("reason")):
            out.append(str(st.get("name")))
    return out


def crash_looping(pod: dict[str, Any], min_restarts: int) -> list[str]:
    """The containers of ``pod`` waiting in CrashLoopBackOff with at least ``min_restarts``
    restarts: what the restart rule is for, as the kubelet reports it."""
    return [
        str(st.get("name"))
        for st in _statuses(pod)
        if ((st.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"
        and _int(st.get("restartCount")) >= min_restarts
    ]


def restarted(pod: dict[str, Any], min_restarts: int) -> bool:
    """A container of ``pod`` restarted at least ``min_restarts`` times (crash-looping, maybe
    running between two crashes right now)."""
    return any(_int(st.get("restartCount")) >= min_restarts for st in _statuses(pod))


def _statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    out = (pod.get("status") or {}).get("containerStatuses") or []
    return [st for st in out if isinstance(st, dict)]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def template_containers(obj: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """The containers of a controller's Pod template by name (a CronJob's: its jobTemplate's)."""
    spec = _dict(obj.get("spec"))
    if kind == "CronJob":
        spec = _dict(_dict(spec.get("jobTemplate")).get("spec"))
    out = _dict(_dict(spec.get("template")).get("spec")).get("containers")
    if not isinstance(out, list):
        return {}
    return {c["name"]: c for c in out if isinstance(c, dict) and isinstance(c.get("name"), str)}


def _memory(c: dict[str, Any]) -> str:
    """A container's memory limit, else its request ("" for none)."""
    res = _dict(c.get("resources"))
    memory = _dict(res.get("limits")).get("memory") or _dict(res.get("requests")).get("memory")
    return str(memory or "")


def _same_quantity(a: str, b: str) -> bool:
    try:
        return memory_bytes(a) == memory_bytes(b)
    except ValueError:
        return False


def not_as_template(
    pod: dict[str, Any], owner: tuple[dict[str, Any], str, str], names: list[str]
) -> str:
    """Why the containers ``names`` of ``pod`` are not what its top controller's Pod template
    says ("" when they are): each must be in the template, with its image, command, args and
    memory limit. A Pod that names a real ReplicaSet and copies its labels is proven the
    ReplicaSet's (Kubernetes' own controller would count it), yet runs what its author wrote:
    its OOMKill says nothing about the owner's limit."""
    obj, _, kind = owner
    template = template_containers(obj, kind)
    containers = {
        c.get("name"): c
        for c in (pod.get("spec") or {}).get("containers") or []
        if isinstance(c, dict)
    }
    for name in names:
        c, t = containers.get(name) or {}, template.get(name)
        if t is None:
            return f"container {name[:63]} is not in the {kind}'s Pod template"
        for what in ("image", "command", "args"):
            if c.get(what) != t.get(what):
                return (
                    f"container {name[:63]} has {what} {str(c.get(what))[:200]}, the {kind}'s "
                    f"template {str(t.get(what))[:200]}"
                )
        mine, theirs = _memory(c), _memory(t)
        if not mine or not _same_quantity(mine, theirs):
            return (
                f"container {name[:63]} has memory {mine[:40] or 'none'}, the {kind}'s template "
                f"{theirs[:40] or 'none'}"
            )
    return ""


MAX_KEY_NAME = 63  # the name part of an annotation key (after prefix/)
HASHED = 8  # hex digits of the hash that keeps a cut container name distinct
MAX_BASE_NAME = settings.MAX_BASE_NAME  # memory.annotation's name part, at most
assert MAX_BASE_NAME == MAX_KEY_NAME - HASHED - 3  # "." + a cut name + "_" + the hash
_KEY_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def annotation_key(base: str, container: str) -> str:
    """``<base>.<container>``, a valid annotation key for any container name: ``prefix/name``,
    the name at most 63 characters of ``[A-Za-z0-9._-]``, alphanumeric at both ends. A name
    that does not fit is cut and given a hash of the whole after a ``_`` (distinct containers,
    distinct keys: a container name, a DNS label, has no ``_``, so no name that fits reads as
    another's cut one). ``base``'s name part is at most ``MAX_BASE_NAME`` (settings.py checks
    it)."""
    prefix, slash, name = base.rpartition("/")
    whole = f"{name}.{container}"
    if len(whole) <= MAX_KEY_NAME and _KEY_NAME.fullmatch(whole):
        return base + "." + container
    digest = hashlib.sha256(container.encode()).hexdigest()[:HASHED]
    room = MAX_KEY_NAME - len(name) - 2 - HASHED
    kept = re.sub(r"[^-A-Za-z0-9_.]", "-", container)[: max(room, 0)].strip("-_.")
    return f"{prefix}{slash}{name}.{kept}_{digest}" if kept else f"{prefix}{slash}{name}._{digest}"


def plan(
    ev: KubeEvent,
    pod: dict[str, Any],
    owner: tuple[dict[str, Any], str, str] | None,
    cfg: RemediationSettings,
) -> Action | None:
    """The action for ``ev`` on ``pod`` (its current state), or None. ``owner`` is the Pod's
    top controller (object, apiVersion, kind), every link to it proven from the owner's side
    (``k8s_event_common.owners.walk``), when the caller found one: None when the Pod has no
    controller (an unproven one is the caller's refusal, never passed here)."""
    if not ev.warning or ev.involved.kind != "Pod":
        return None
    meta = pod.get("metadata") or {}
    if not ev.involved.uid or meta.get("uid") != ev.involved.uid:
        return None  # a newer Pod of the same name: not the one the Event is about
    if meta.get("deletionTimestamp"):
        return None  # on its way out already
    mem = cfg.memory
    oom = oom_killed(pod)
    if mem.enabled and ev.reason in mem.reasons and oom:
        if owner is None:
            return None
        obj, api_version, kind = owner
        containers = {c["name"]: c for c in (pod.get("spec") or {}).get("containers") or []}
        annotations = {}
        for name in oom:
            current = _memory(containers.get(name) or {})
            if current:
                annotations[annotation_key(mem.annotation, name)] = suggest(current, mem.factor)
        if not annotations:
            return None
        carried = (obj.get("metadata") or {}).get("annotations") or {}
        return Action(
            SUGGEST_MEMORY,
            target_of(obj, api_version, kind),
            f"container(s) {', '.join(oom)} of Pod {meta.get('name')} OOMKilled",
            annotations,
            effect_present=all(carried.get(k) == v for k, v in annotations.items()),
            owner=owner_name(owner),
        )
    rst = cfg.restart
    if rst.enabled and ev.reason in rst.reasons and ev.count >= rst.min_count:
        if rst.only_controlled and owner is None:
            return None  # no proven controller: nobody would make it again
        looping = crash_looping(pod, rst.min_count)
        if not looping:
            return None
        return Action(
            DELETE_POD,
            target_of(pod, "v1", "Pod"),
            f"{ev.reason} x{ev.count} (at least {rst.min_count}), container(s) "
            f"{', '.join(looping)} in CrashLoopBackOff",
            owner=owner_name(owner),
        )
    return None
