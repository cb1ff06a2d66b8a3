"""The config files of this repository's programs, one builder per program: ``bridge_config``
(k8s-event-bridge) and ``subscriber_config`` (a subscriber by its module: k8s-event-alerting,
k8s-event-remediation, k8s-event-otlp), each written as YAML and run by ``k8s_event_sim.programs``.

Each connects the program to a given NATS (and API server), gives it a free loopback HTTP port
and JSON logs, and takes the rest as ``sections`` merged in per key (``deep_merge``), so a
caller names only what it changes. The bridge's are test-sized (short timeouts, back-off and
checkpoint interval, debug logs) unless ``defaults``: then every key is at its default but where
it connects and ``log.level: warning``, as the benchmark measures it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

from k8s_event_sim.natsserver import free_port

__all__ = ["SUBSCRIBERS", "bridge_config", "deep_merge", "subscriber_config"]

# what a bridge_config holds unless ``defaults``: short enough for a test to see each of them
TEST_SIZED: dict[str, Any] = {
    "kubernetes": {
        "read_timeout": "5s",
        "connect_timeout": "2s",
        "backoff": {"initial": "50ms", "max": "1s", "reset_after": "30s"},
    },
    "nats": {"ack_timeout": "1s"},
    "checkpoint": {"interval": "100ms"},
    "http": {"unready_after": "2s"},
    "log": {"level": "debug"},
    "shutdown": {"drain_timeout": "10s"},
}

# the subscribers' modules and the prefixes of their environment variables
SUBSCRIBERS = {
    "k8s_event_consumer.alerting": "ALERTING_",
    "k8s_event_consumer.remediation": "REMEDIATION_",
    "k8s_event_consumer.otlp": "OTLP_",
    "k8s_event_consumer.digests": "DIGESTS_",
}


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in: a dict into a dict key by key, anything else
    replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = (
            deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        )
    return out


def _write(directory: Path, name: str | None, stem: str, cfg: dict[str, Any]) -> Path:
    path = directory / (name or f"{stem}-{random.randrange(1 << 30)}.yaml")
    path.write_text(yaml.safe_dump(cfg))
    return path


def bridge_config(
    directory: Path,
    nats_url: str,
    kubeconfig: Path,
    *,
    defaults: bool = False,
    name: str | None = None,
    **sections: Any,
) -> Path:
    """A bridge's config in ``directory`` (file ``name``, else a new name each call): cluster
    "test", the API server of ``kubeconfig``, ``nats_url``, a free HTTP port on loopback, JSON
    logs; test-sized intervals unless ``defaults``; ``sections`` override per key."""
    cfg: dict[str, Any] = {
        "cluster": {"name": "test"},
        "kubernetes": {"kubeconfig": str(kubeconfig)},
        "nats": {"servers": [nats_url]},
        "http": {"host": "127.0.0.1", "port": free_port()},
        "log": {"level": "warning", "format": "json"},
    }
    if not defaults:
        cfg = deep_merge(cfg, TEST_SIZED)
    return _write(directory, name, "bridge", deep_merge(cfg, sections))


def subscriber_config(
    directory: Path,
    module: str,
    nats: dict[str, Any],
    kubeconfig: Path,
    *,
    name: str | None = None,
    **sections: Any,
) -> Path:
    """A subscriber's config (``module`` of ``SUBSCRIBERS``) in ``directory`` (file ``name``,
    else a new name each call) with test-sized settings: the ``nats`` section given, its own
    HTTP port, debug logs, the remediation worker on ``kubeconfig`` for cluster "test";
    ``sections`` override per key."""
    cfg: dict[str, Any] = {
        "nats": nats,
        "http": {"host": "127.0.0.1", "port": free_port()},
        "log": {"level": "debug", "format": "json"},
    }
    if module.endswith(".remediation"):
        cfg["kubernetes"] = {"kubeconfig": str(kubeconfig), "cluster": "test"}
    return _write(directory, name, module.rsplit(".", 1)[1], deep_merge(cfg, sections))
