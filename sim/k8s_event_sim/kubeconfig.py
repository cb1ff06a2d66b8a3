"""A kubeconfig file for one API server: the simulated one (the demo, the benchmark, the soak,
the integration tests) or a real kube-apiserver (the e2e tier, with its CA and a client
certificate or a token)."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["write_kubeconfig"]


def write_kubeconfig(
    path: Path,
    server: str,
    *,
    token: str | None = None,
    token_file: str | None = None,
    ca_file: str | Path | None = None,
    client_cert: str | Path | None = None,
    client_key: str | Path | None = None,
    user: str = "bridge",
    cluster: str = "sim",
) -> Path:
    """Write a kubeconfig whose current context is ``user`` on ``cluster`` at ``server``;
    mode 0600 (it may hold a token). JSON, which is YAML: kubectl and kubernetes_asyncio both
    read it."""
    credentials: dict[str, str] = {}
    if client_cert and client_key:
        credentials["client-certificate"] = str(client_cert)
        credentials["client-key"] = str(client_key)
    if token:
        credentials["token"] = token
    if token_file:
        credentials["tokenFile"] = token_file
    endpoint: dict[str, str] = {"server": server}
    if ca_file:
        endpoint["certificate-authority"] = str(ca_file)
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": endpoint}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": cluster, "user": user}}],
        "current-context": user,
    }
    path.write_text(json.dumps(doc, indent=2))
    path.chmod(0o600)
    return path
