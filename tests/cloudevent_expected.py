"""The CloudEvent docs/design.md promises for a Kubernetes Event ("The CloudEvent"), written
out independently of bridge/core/converting.py (shared by the e2e truth check and
tests/unit/test_real_events.py)."""

from __future__ import annotations

import re
from typing import Any

CLUSTER = "living-e2e"


def _token(text: str) -> str:
    """A value as a subject token, as docs/design.md says (not cut: these values are short)."""
    if not text:
        return "_"
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", text):
        return text
    kept = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-"
    return "_" + "".join(
        chr(b) if b in kept else "__" if b == ord(".") else f"_{b:02x}" for b in text.encode()
    )


def expected_attributes(ev: dict[str, Any], cluster: str = CLUSTER) -> dict[str, str]:
    """docs/design.md's mapping, written out independently of bridge/core/converting.py."""
    m, obj = ev["metadata"], ev.get("involvedObject") or {}
    series = ev.get("series") or {}
    time = (
        series.get("lastObservedTime")
        or ev.get("lastTimestamp")
        or ev.get("eventTime")
        or m["creationTimestamp"]
    )
    count = series.get("count") or ev.get("count") or 1
    return {
        "nats-subject": ".".join(
            ["k8s", "events", cluster]
            + [_token(t) for t in (m["namespace"], obj.get("kind", ""), ev["reason"])]
        ),
        "specversion": "1.0",
        "datacontenttype": "application/json",
        "id": f"{m['uid']}/{m['resourceVersion']}",
        "source": f"k8s://{cluster}/namespaces/{m['namespace']}",
        "type": f"io.k8s.event.{ev['type'].lower()}",
        "subject": f"{obj.get('kind')}/{obj.get('name')}",
        "time": time,
        "k8scluster": cluster,
        "k8snamespace": m["namespace"],
        "k8skind": obj.get("kind", ""),
        "k8sname": obj.get("name", ""),
        "k8sreason": ev["reason"],
        "k8scount": str(count),
    }
