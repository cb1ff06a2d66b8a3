"""Whose word an Event's object references are: the one rule every program applies.

An Event lives in its namespace, ``metadata.namespace``, and whoever may create Events there
writes every field of it: its ``involvedObject`` (``regarding`` in events.k8s.io) and
``related`` may name any kind, namespace, name and uid. The API server checks the reference
against the Event's namespace only for an Event without ``eventTime``
(``pkg/apis/core/validation/events.go``, ``legacyValidateEvent``, Kubernetes 1.36):

- ``eventTime`` unset: a reference with a namespace must be in the Event's; one without must be
  in an Event of namespace ``""`` or ``default`` ("for compatibility with old clients");
- ``eventTime`` set (every events.k8s.io Event, and any core/v1 one that sets it): a reference
  without a namespace must be in an Event of ``default`` or ``kube-system``; **a reference with
  a namespace is not checked at all**, and ``related`` never is.

So a tenant that may create Events in its namespace writes one with ``eventTime`` about a Pod of
another namespace, with that Pod's name and uid. The rule here closes that for every program:

- the namespace an Event speaks for is always its own ``metadata.namespace``
  (``Verdict.namespace``);
- a reference is **trusted** when it is in that namespace (``same_namespace``); when it is the
  Namespace object of that namespace (``own_namespace``); when it is of a namespaced kind and
  names no namespace: taken as in the Event's namespace, where its name can name nothing else
  (``namespace_implied``: an old client's Event in ``default``; the API server refuses one
  elsewhere); or when it is of a cluster-scoped kind (a Node) or names no namespace, and the
  Event is in ``default`` or ``kube-system`` (``CLUSTER_NAMESPACES``: where Kubernetes' own
  recorders write the Events of cluster-scoped objects, and the only namespaces the API server
  takes a reference without a namespace from; ``cluster_namespace``);
- any other reference is **foreign**, and says why: ``other_namespace`` (it names another
  namespace), ``cluster_scoped`` (a cluster-scoped kind, a Node, from a namespace Kubernetes
  writes none in: any tenant may name any Node there), ``no_namespace`` (no namespace, from a
  namespace where the API server takes none).

A foreign reference is marked (``Tenancy.marks``: ``object:other_namespace``,
``related:other_namespace``) and none of its names, uids or node names reaches an output: the
bridge's CloudEvent subject and ``k8sname`` and its enrichment, the OTLP resource, the alert
labels, the remediation worker's reads. docs/design.md, "The tenant's word", is the rule's one
statement; ``tests/unit/test_tenancy.py`` runs one table of cases against every program.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from k8s_event_common.owners import KINDS

# where the API server takes a reference without a namespace (legacyValidateEvent), and where
# Kubernetes' own recorders write the Events of cluster-scoped objects
CLUSTER_NAMESPACES: Final = frozenset({"default", "kube-system"})

# cluster-scoped kinds of Kubernetes itself (by kind alone, whatever the apiVersion says: a kind
# named Node is read as a Node, never as a namespaced look-alike)
CLUSTER_KINDS: Final = frozenset(
    {k for k, v in KINDS.items() if not v.namespaced}
    | {
        "Namespace",
        "Node",
        "PersistentVolume",
        "StorageClass",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "APIService",
        "PriorityClass",
        "RuntimeClass",
        "IngressClass",
        "CSIDriver",
        "CSINode",
        "VolumeAttachment",
        "CertificateSigningRequest",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "FlowSchema",
        "PriorityLevelConfiguration",
    }
)

# namespaced kinds of Kubernetes itself: a reference to one without a namespace is taken as
# in the Event's namespace
NAMESPACED_KINDS: Final = frozenset(
    {k for k, v in KINDS.items() if v.namespaced}
    | {
        "ConfigMap",
        "Secret",
        "ServiceAccount",
        "Endpoints",
        "EndpointSlice",
        "Event",
        "LimitRange",
        "ResourceQuota",
        "PodTemplate",
        "ControllerRevision",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Ingress",
        "NetworkPolicy",
        "Role",
        "RoleBinding",
        "Lease",
    }
)

# trusted, and why
SAME_NAMESPACE: Final = "same_namespace"  # in the Event's own namespace
OWN_NAMESPACE: Final = "own_namespace"  # the Namespace object the Event is in
CLUSTER_NAMESPACE: Final = "cluster_namespace"  # no namespace, from default or kube-system
NAMESPACE_IMPLIED: Final = "namespace_implied"  # a namespaced kind without one, from those
# foreign, and why
OTHER_NAMESPACE: Final = "other_namespace"  # names another namespace
CLUSTER_SCOPED: Final = "cluster_scoped"  # a cluster-scoped kind from a tenant's namespace
NO_NAMESPACE: Final = "no_namespace"  # no namespace, from a namespace the API server refuses
TRUSTED: Final = (SAME_NAMESPACE, OWN_NAMESPACE, CLUSTER_NAMESPACE, NAMESPACE_IMPLIED)
FOREIGN: Final = (OTHER_NAMESPACE, CLUSTER_SCOPED, NO_NAMESPACE)

# the parts of a mark: the involved object (involvedObject or regarding), the related one
OBJECT: Final = "object"
RELATED: Final = "related"


@dataclass(frozen=True)
class Verdict:
    """What one reference of an Event is taken for."""

    namespace: str  # the Event's own metadata.namespace: the only namespace its output names
    trusted: bool
    why: str  # one of TRUSTED or FOREIGN
    # a trusted reference to an object of no namespace (a Node's Event in default): the output
    # names no namespace for the object
    cluster_scoped: bool = False

    @property
    def object_namespace(self) -> str:
        """The namespace of the object, as the outputs write it: none for a trusted
        cluster-scoped object, else the Event's own (a foreign reference's never)."""
        return "" if self.cluster_scoped else self.namespace


@dataclass(frozen=True)
class Tenancy:
    """The verdicts on an Event's references: its involved object, and ``related`` (None:
    there is none)."""

    namespace: str
    involved: Verdict
    related: Verdict | None = None

    @property
    def marks(self) -> tuple[str, ...]:
        """``part:why`` of each foreign reference, in order (``object:other_namespace``)."""
        out = []
        if not self.involved.trusted:
            out.append(f"{OBJECT}:{self.involved.why}")
        if self.related is not None and not self.related.trusted:
            out.append(f"{RELATED}:{self.related.why}")
        return tuple(out)

    @property
    def mark(self) -> str:
        """The marks comma-separated; "" when every reference is trusted."""
        return ",".join(self.marks)


def _str(value: Any) -> str:
    return value if value.__class__ is str else ""


# the kinds by their folded spelling: a reader that folds a kind's case (the OTLP mapping's
# k8s.<kind>.* attributes, a backend) takes ``node`` or ``NODE `` for a Node, so the rule does too
_CLUSTER_FOLDED: Final = frozenset(k.lower() for k in CLUSTER_KINDS)
_NAMESPACED_FOLDED: Final = frozenset(k.lower() for k in NAMESPACED_KINDS)


def fold(kind: Any) -> str:
    """A kind as the rule compares it, as a reader could take it: compatibility characters
    folded (NFKC: NODE in full-width letters, the Kelvin sign), blanks, control and invisible
    format characters anywhere dropped (a tab inside, a zero-width space, a NUL), the case
    folded. A look-alike letter of another script (a Greek omicron) stays another letter."""
    k = _str(kind)
    if not (k.isascii() and k.isalnum()):
        k = "".join(
            c
            for c in unicodedata.normalize("NFKC", k)
            if not c.isspace() and unicodedata.category(c) not in ("Cc", "Cf")
        )
    return k.lower()


def cluster_kind(kind: Any) -> bool:
    """Whether ``kind``, folded, is a cluster-scoped kind of Kubernetes (a Node, a Namespace)."""
    return fold(kind) in _CLUSTER_FOLDED


def reference(event_namespace: Any, kind: Any, namespace: Any, name: Any = "") -> Verdict:
    """The verdict on one reference (``kind``, ``namespace``, ``name``: as the Event has them,
    any type) of an Event in ``event_namespace`` (the module docstring's rule). A kind is
    compared by ``fold``: ``node`` and ``NODE`` are a Node's, however the Event spells it."""
    own = _str(event_namespace)
    k, ns = fold(kind), _str(namespace)
    if k == "namespace" and own and _str(name) == own and ns in ("", own):
        return Verdict(own, True, OWN_NAMESPACE)
    if ns and ns != own:
        return Verdict(own, False, OTHER_NAMESPACE)
    if not ns and k in _NAMESPACED_FOLDED:
        # read in the Event's own namespace, where its name can name nothing else
        return Verdict(own, True, NAMESPACE_IMPLIED)
    is_cluster = k in _CLUSTER_FOLDED
    if own in CLUSTER_NAMESPACES and (is_cluster or not ns):
        return Verdict(own, True, CLUSTER_NAMESPACE, cluster_scoped=True)
    if is_cluster:  # a Node named from a tenant's namespace (with or without a namespace)
        return Verdict(own, False, CLUSTER_SCOPED)
    if ns:
        return Verdict(own, True, SAME_NAMESPACE)
    return Verdict(own, False, NO_NAMESPACE)


def judge(event_namespace: Any, involved: Any, related: Any = None) -> Tenancy:
    """The verdicts on an Event's references: ``involved`` and ``related`` as the Event has
    them (JSON objects; anything else is a reference of nothing, ``related`` None or absent
    none at all)."""
    own = _str(event_namespace)
    inv = involved if isinstance(involved, Mapping) else {}
    verdict = reference(own, inv.get("kind"), inv.get("namespace"), inv.get("name"))
    rel = None
    if related is not None:
        r = related if isinstance(related, Mapping) else {}
        rel = reference(own, r.get("kind"), r.get("namespace"), r.get("name"))
    return Tenancy(own, verdict, rel)


def involved_of(event: Mapping[str, Any]) -> Any:
    """An Event's involved object: ``involvedObject`` (core/v1), else ``regarding``
    (events.k8s.io); None when it has neither."""
    inv = event.get("involvedObject")
    if isinstance(inv, Mapping) and inv:
        return inv
    reg = event.get("regarding")
    return reg if isinstance(reg, Mapping) else inv


def of_event(event: Any) -> Tenancy:
    """The verdicts on an Event as the API server or the stream has it: core/v1
    (``involvedObject``, ``related``), events.k8s.io (``regarding``, ``related``), or a
    CloudEvent's ``data`` (the Event as the bridge read it)."""
    ev = event if isinstance(event, Mapping) else {}
    meta = ev.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return judge(ns, involved_of(ev), ev.get("related"))
