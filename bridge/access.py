"""The RBAC rules a configuration needs beyond what the bridge always needs.

The bridge always needs list and watch on events, get on the kube-system Namespace and its
Lease (deploy/clusterrole.yaml, deploy/role.yaml). Enrichment needs more, and only what is
configured:

- ``enrich.namespace.labels`` or ``.annotations``: list and watch on namespaces, cluster-wide
  (the bridge keeps every Namespace's values from a watch);
- ``enrich.object.labels``, ``.owner_kind`` or ``.owner_name``: get on the resource of each
  kind in ``enrich.object.kinds``, in its API group (the involved objects and their owners).

Nothing configured: no rule. deploy/components/enrich/ and the chart grant these rules (the
unit tests hold both to :func:`rules`).
"""

from __future__ import annotations

from bridge.settings import Settings
from k8s_event_common import owners

__all__ = ["NAMESPACES_RULE", "Rule", "cluster_role", "rules"]

# a ClusterRole rule: apiGroups, resources, verbs
Rule = dict[str, list[str]]

NAMESPACES_RULE: Rule = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}


def rules(settings: Settings) -> list[Rule]:
    """The ClusterRole rules ``settings`` needs for enrichment, in a fixed order: list and
    watch on namespaces first, then one get rule per API group (core first, then by name),
    each with its resources sorted."""
    enrich = settings.enrich
    out: list[Rule] = []
    if enrich.namespace.labels or enrich.namespace.annotations:
        out.append({k: list(v) for k, v in NAMESPACES_RULE.items()})
    if enrich.reads_objects:
        groups: dict[str, set[str]] = {}
        for kind in enrich.object.kinds:
            k = owners.KINDS[kind]
            groups.setdefault(k.group, set()).add(k.resource)
        for group in sorted(groups):
            out.append({"apiGroups": [group], "resources": sorted(groups[group]), "verbs": ["get"]})
    return out


def cluster_role(settings: Settings, name: str = "k8s-event-bridge-enrich") -> dict[str, object]:
    """The ClusterRole of :func:`rules` (``k8s-event-bridge check-config --rbac``); with no
    rule, one with ``rules: []`` (nothing to grant beyond deploy/)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules(settings),
    }
