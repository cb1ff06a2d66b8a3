"""The kinds the programs read, and the one owner walk: who controls an object, proven from the
owner's side. Pure: no I/O, no client (the bridge's reads and cache, and the remediation
worker's reads, drive the same walk).

A child's controller ownerReference is the child's word, and whoever may create the child
writes it: a Pod may name any Deployment of its namespace, with its real uid, in any API
group. So a reference counts only when the owner claims the child too:

- the owner is of a kind of ``KINDS`` that the walk may read (``kinds``) and that has a claim
  (``CLAIMS``), its apiVersion in that kind's API group, namespaced, read in the child's
  namespace, and a kind that makes the child's kind (``CHILDREN``: a Deployment makes
  ReplicaSets, never Pods);
- it exists with the uid the reference names;
- it claims the child: its selector selects the child's labels (ReplicaSet, Deployment,
  StatefulSet, DaemonSet, Job: ``spec.selector``, matchLabels and matchExpressions; a
  ReplicationController: its map ``spec.selector``), an empty selector claiming nothing; and
  what its controller adds: a ReplicaSet's ``pod-template-hash`` label is the child's, a Job's
  uid is the child's ``batch.kubernetes.io/controller-uid`` (or ``controller-uid``) label, a
  StatefulSet's Pod is named ``<set>-<ordinal>``;
- a CronJob has no selector: it claims a Job that its ``status.active`` lists by uid (written by
  the CronJob controller, through the status subresource), or a Job named
  ``<cronjob>-<minutes>`` (the controller's naming) that carries every label of its
  ``jobTemplate`` (at least one): as strong as a selector, no stronger.

``walk`` starts from the involved object as read (``facts``), yields each owner it needs read
(``Want``) and is sent what was read (``Facts``) or why not (a string: ``NOTFOUND`` or the
reader's own why); it returns ``Owners``: the owners proven, nearest first, and why it
stopped: ``TOP`` (the last one has no controller: all proven) or a reason code.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final


@dataclass(frozen=True)
class Kind:
    """A kind of the table: its API group ("" for the core group), version, resource."""

    group: str
    version: str
    resource: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        """The API path prefix: ``/api/v1``, ``/apis/apps/v1``."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


# every kind either program reads: the bridge's enrich.object.kinds name some of these, the
# worker's owner walk reads the controllers among them
KINDS: Final[dict[str, Kind]] = {
    "Pod": Kind("", "v1", "pods", True),
    "Node": Kind("", "v1", "nodes", False),
    "Service": Kind("", "v1", "services", True),
    "ReplicationController": Kind("", "v1", "replicationcontrollers", True),
    "PersistentVolumeClaim": Kind("", "v1", "persistentvolumeclaims", True),
    "ReplicaSet": Kind("apps", "v1", "replicasets", True),
    "Deployment": Kind("apps", "v1", "deployments", True),
    "StatefulSet": Kind("apps", "v1", "statefulsets", True),
    "DaemonSet": Kind("apps", "v1", "daemonsets", True),
    "Job": Kind("batch", "v1", "jobs", True),
    "CronJob": Kind("batch", "v1", "cronjobs", True),
}
# the kinds that can claim a child (a selector, or a CronJob's Jobs): the only owners counted
CLAIMS: Final = frozenset(
    {"ReplicaSet", "Deployment", "StatefulSet", "DaemonSet", "ReplicationController", "Job"}
    | {"CronJob"}
)
# what each kind's controller makes (and so may claim): a Deployment its ReplicaSets, never a
# Pod directly, whatever labels the Pod copies from its selector
CHILDREN: Final[dict[str, frozenset[str]]] = {
    "Deployment": frozenset({"ReplicaSet"}),
    "ReplicaSet": frozenset({"Pod"}),
    "StatefulSet": frozenset({"Pod"}),
    "DaemonSet": frozenset({"Pod"}),
    "ReplicationController": frozenset({"Pod"}),
    "Job": frozenset({"Pod"}),
    "CronJob": frozenset({"Job"}),
}
MAX_DEPTH: Final = 4  # owners followed up from the involved object (Pod → RS → Deployment: 2)

# why the walk stopped
TOP: Final = "top"  # the last object has no controller: every link proven
KIND: Final = "kind"  # the controller is of a kind the walk may not read, or that claims nothing
GROUP: Final = "group"  # its apiVersion is not in its kind's API group
NAMESPACE: Final = "namespace"  # not a namespaced kind, or read in another namespace
INVALID: Final = "invalid"  # the reference's name is not an object name
NOTFOUND: Final = "notfound"  # no such owner
UID: Final = "uid"  # the reference names no uid, or another object has that name now
UNCLAIMED: Final = "unclaimed"  # the owner exists and does not claim the child
DEPTH: Final = "depth"  # still a controller after MAX_DEPTH owners
# the whys that say the ownership is not proven (any other why but TOP is the reader's: a
# timeout, a refusal ...)
UNPROVEN: Final = frozenset({KIND, GROUP, NAMESPACE, INVALID, NOTFOUND, UID, UNCLAIMED, DEPTH})

POD_TEMPLATE_HASH: Final = "pod-template-hash"
JOB_UID_LABELS: Final = ("batch.kubernetes.io/controller-uid", "controller-uid")
MAX_ACTIVE: Final = 64  # a CronJob's status.active entries kept (each a uid)
_OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class Ref:
    """A controller ownerReference, as the child wrote it."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True)
class Requirement:
    """One matchExpressions entry."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        return False  # an operator not known: selects nothing


@dataclass(frozen=True)
class Selector:
    """A label selector (metav1.LabelSelector, or a ReplicationController's map)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether it selects ``labels``; an empty selector claims nothing here (Kubernetes
        reads it as "everything", and its workload APIs refuse it)."""
        if not self.match_labels and not self.expressions:
            return False
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.expressions
        )

    def size(self) -> int:
        n = sum(len(k) + len(v) + 50 for k, v in self.match_labels)
        return n + sum(len(r.key) + sum(map(len, r.values)) + 80 for r in self.expressions)


@dataclass(frozen=True)
class Facts:
    """What the walk needs of one object: who it is, its labels, its controller reference,
    and what it claims (for an owner)."""

    kind: str
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    controller: Ref | None = None
    selector: Selector | None = None
    # a CronJob's: the uids its status.active lists, and its jobTemplate's labels
    active: frozenset[str] = frozenset()
    template_labels: tuple[tuple[str, str], ...] = ()

    def size(self) -> int:
        """Bytes, roughly, as a cache counts them."""
        n = 200 + len(self.kind) + len(self.namespace) + len(self.name) + len(self.uid)
        n += sum(len(k) + len(v) + 50 for k, v in self.labels.items())
        c = self.controller
        if c is not None:
            n += len(c.api_version) + len(c.kind) + len(c.name) + len(c.uid) + 100
        if self.selector is not None:
            n += self.selector.size()
        n += sum(len(u) + 50 for u in self.active)
        return n + sum(len(k) + len(v) + 50 for k, v in self.template_labels)


@dataclass(frozen=True)
class Want:
    """An owner the walk needs read: in ``namespace``, expected with ``uid``."""

    kind: str
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class Owners:
    """What the walk came to: the owners proven, nearest first, and why it stopped."""

    chain: tuple[Facts, ...]
    why: str  # TOP, one of UNPROVEN, or the reader's why
    detail: str = ""

    @property
    def proven(self) -> bool:
        """Every controller reference up to the top proven."""
        return self.why == TOP

    @property
    def top(self) -> Facts | None:
        """The farthest owner proven (None: none)."""
        return self.chain[-1] if self.chain else None


def group_of(api_version: str) -> str:
    """The API group of an apiVersion: ``apps/v1`` → ``apps``, ``v1`` → ``""``."""
    return api_version.rpartition("/")[0]


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def controller_ref(meta: Mapping[str, Any]) -> Ref | None:
    """The first ownerReference with controller: true (the API server allows one)."""
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return Ref(
                _str(ref.get("apiVersion")),
                _str(ref.get("kind")),
                _str(ref.get("name")),
                _str(ref.get("uid")),
            )
    return None


def selector_of(value: Any) -> Selector | None:
    """A metav1.LabelSelector; None when it is none or not well formed (claims nothing)."""
    if not isinstance(value, dict):
        return None
    ml = value.get("matchLabels") or {}
    me = value.get("matchExpressions") or []
    if not isinstance(ml, dict) or not isinstance(me, list):
        return None
    labels = _labels(ml)
    if len(labels) != len(ml):
        return None
    reqs = []
    for e in me:
        if not isinstance(e, dict) or e.get("operator") not in _OPERATORS:
            return None
        values = e.get("values") or []
        if not isinstance(e.get("key"), str) or not isinstance(values, list):
            return None
        reqs.append(Requirement(e["key"], e["operator"], frozenset(map(str, values))))
    return Selector(tuple(sorted(labels.items())), tuple(reqs))


def facts(kind: str, obj: Any, *, keep_labels: bool = True) -> Facts:
    """What the walk needs of an object of ``kind`` as the API server answered it.
    ``keep_labels=False``: its labels are left out (it will not be a child: a cache keeps
    less)."""
    obj = obj if isinstance(obj, dict) else {}
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    spec = obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    controller = controller_ref(meta)
    selector = None
    active: frozenset[str] = frozenset()
    template: tuple[tuple[str, str], ...] = ()
    if kind == "ReplicationController":
        raw = spec.get("selector")
        sel = _labels(raw)
        selector = Selector(tuple(sorted(sel.items()))) if isinstance(raw, dict) else None
        if isinstance(raw, dict) and len(sel) != len(raw):
            selector = None
    elif kind in CLAIMS and kind != "CronJob":
        selector = selector_of(spec.get("selector"))
    elif kind == "CronJob":
        status = obj.get("status")
        refs = status.get("active") if isinstance(status, dict) else None
        if isinstance(refs, list):
            active = frozenset(
                r["uid"] for r in refs[:MAX_ACTIVE] if isinstance(r, dict) and _str(r.get("uid"))
            )
        jt = spec.get("jobTemplate")
        jmeta = jt.get("metadata") if isinstance(jt, dict) else None
        if isinstance(jmeta, dict):
            template = tuple(sorted(_labels(jmeta.get("labels")).items()))
    keep = keep_labels or kind in CLAIMS  # an owner's own labels: a Deployment selects its RS's
    return Facts(
        kind=kind,
        namespace=_str(meta.get("namespace")),
        name=_str(meta.get("name")),
        uid=_str(meta.get("uid")),
        labels=_labels(meta.get("labels")) if keep else {},
        controller=controller,
        selector=selector,
        active=active,
        template_labels=template,
    )


def claims(owner: Facts, child: Facts) -> str:
    """Why ``owner`` does not claim ``child`` ("" when it does)."""
    makes = CHILDREN.get(owner.kind, frozenset())
    if child.kind not in makes:
        return f"a {owner.kind} makes {', '.join(sorted(makes)) or 'nothing'}, not a {child.kind}"
    if owner.kind == "CronJob":
        if child.uid and child.uid in owner.active:
            return ""
        suffix = child.name[len(owner.name) + 1 :]
        named = child.name.startswith(owner.name + "-") and suffix.isdigit()
        template = owner.template_labels
        if named and template and all(child.labels.get(k) == v for k, v in template):
            return ""
        return (
            "not in its status.active, and not named <cronjob>-<minutes> with its jobTemplate's"
            " labels"
        )
    sel = owner.selector
    if sel is None or not sel.matches(child.labels):
        return "its selector does not select the child's labels"
    if owner.kind == "ReplicaSet":
        want = owner.labels.get(POD_TEMPLATE_HASH)
        if want is not None and child.labels.get(POD_TEMPLATE_HASH) != want:
            return f"the child's {POD_TEMPLATE_HASH} is not the ReplicaSet's"
    if owner.kind == "Job" and not any(child.labels.get(k) == owner.uid for k in JOB_UID_LABELS):
        return "the child's controller-uid label is not the Job's uid"
    if owner.kind == "StatefulSet" and child.kind == "Pod":
        ordinal = child.name[len(owner.name) + 1 :]
        if not (child.name.startswith(owner.name + "-") and ordinal.isdigit()):
            return "the Pod is not named <statefulset>-<ordinal>"
    return ""


def walk(
    child: Facts, kinds: frozenset[str] | set[str], max_depth: int = MAX_DEPTH
) -> Generator[Want, Facts | str, Owners]:
    """The owners of ``child`` proven, up to the top: yields each owner to read, is sent it
    (or why it could not be read: ``NOTFOUND``, or the reader's why), returns ``Owners``.
    ``kinds``: the kinds the walk may read (those without a claim are never read)."""
    chain: list[Facts] = []
    current = child
    for _ in range(max_depth):
        ref = current.controller
        if ref is None:
            return Owners(tuple(chain), TOP)
        what = f"{current.kind} {current.name}: controller {ref.api_version} {ref.kind} {ref.name}"
        kind = KINDS.get(ref.kind)
        if kind is None or ref.kind not in kinds or ref.kind not in CLAIMS:
            return Owners(tuple(chain), KIND, f"{what}: a kind not read")
        if group_of(ref.api_version) != kind.group:
            return Owners(tuple(chain), GROUP, f"{what}: not in API group {kind.group!r}")
        if not kind.namespaced or not current.namespace:
            return Owners(tuple(chain), NAMESPACE, f"{what}: not in the child's namespace")
        if len(ref.name) > 253 or not _SUBDOMAIN.fullmatch(ref.name):
            return Owners(tuple(chain), INVALID, f"{what}: not an object name")
        if not ref.uid:
            return Owners(tuple(chain), UID, f"{what}: the reference names no uid")
        got = yield Want(ref.kind, current.namespace, ref.name, ref.uid)
        if isinstance(got, str):
            why = got
            return Owners(tuple(chain), why, f"{what}: {why}")
        if got.uid != ref.uid:
            return Owners(tuple(chain), UID, f"{what}: its uid is {got.uid or 'none'}")
        if got.namespace != current.namespace or got.kind != ref.kind:
            return Owners(tuple(chain), NAMESPACE, f"{what}: read in {got.namespace}")
        problem = claims(got, current)
        if problem:
            return Owners(tuple(chain), UNCLAIMED, f"{what}: {problem}")
        chain.append(got)
        current = got
    if current.controller is None:
        return Owners(tuple(chain), TOP)
    return Owners(tuple(chain), DEPTH, f"still a controller after {max_depth} owners")


def drive(
    child: Facts, kinds: frozenset[str] | set[str], read: Mapping[Want, Facts | str]
) -> Owners:
    """The walk driven from answers known in advance (tests, a cache): a Want not in
    ``read`` is answered NOTFOUND."""
    w = walk(child, kinds)
    try:
        want = next(w)
        while True:
            want = w.send(read.get(want, NOTFOUND))
    except StopIteration as done:
        result: Owners = done.value
        return result
