"""k8s_event_common.kube.lean: kubernetes_asyncio's config and ApiClient without its model
classes, in the bridge and in the remediation worker."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.processes  # each test imports in a fresh interpreter


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip()


def test_the_bridge_imports_no_model_class() -> None:
    out = _run(
        """
        import sys
        import bridge.app
        from k8s_event_common.kube.lean import client, config, incluster_config
        assert client.ApiClient and client.Configuration and client.CoreV1Api
        assert config.load_kube_config and incluster_config.SERVICE_TOKEN_FILENAME
        models = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models.")]
        apis = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.api.")]
        print(len(models), sorted(apis))
        """
    )
    assert out == "0 ['kubernetes_asyncio.client.api.core_v1_api']"


def test_the_remediation_worker_imports_no_model_class() -> None:
    """The worker's client is the shared one: kubernetes_asyncio lean there too."""
    out = _run(
        """
        import sys
        import k8s_event_consumer.remediation.__main__
        import k8s_event_common.kube.lean
        models = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models.")]
        apis = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.api.")]
        print(len(models), len(apis), "kubernetes_asyncio.config" in sys.modules)
        """
    )
    assert out == "0 0 True"


def test_other_names_still_load_the_whole_client() -> None:
    out = _run(
        """
        import bridge.kube.client
        import kubernetes_asyncio
        from kubernetes_asyncio.client import V1Pod, AppsV1Api
        from kubernetes_asyncio.client.models import CoreV1Event
        names = V1Pod.__name__, AppsV1Api.__name__, CoreV1Event.__name__
        print(*names, kubernetes_asyncio.__version__)
        """
    )
    assert out.startswith("V1Pod AppsV1Api CoreV1Event ")


def test_a_client_imported_first_is_left_alone() -> None:
    out = _run(
        """
        import sys
        import kubernetes_asyncio.client
        import bridge.kube.client
        print(sum(m.startswith("kubernetes_asyncio.client.models.") for m in sys.modules) > 100)
        """
    )
    assert out == "True"


def test_what_kubernetes_asyncio_took_from_the_stand_ins_still_works() -> None:
    """urllib3, dateutil.parser and multiprocessing.pool are not imported with
    kubernetes_asyncio; the names it took from them import the real module when used: basic
    auth from a kubeconfig, a model's date, async_req's pool."""
    out = _run(
        """
        import sys
        import bridge.kube.client
        from kubernetes_asyncio.client import api_client, configuration
        unused = ("urllib3", "dateutil.parser", "multiprocessing.pool")
        print([m for m in unused if m in sys.modules])
        cfg = configuration.Configuration(username="u", password="p")
        print(cfg.get_basic_auth_token())
        print(api_client.parse("2026-12-02T10:00:00Z").isoformat())
        pool = api_client.ThreadPool(1)
        print(pool.apply(sum, ([1, 2],)))
        pool.close()
        import urllib3, dateutil.parser, multiprocessing.pool
        print(urllib3.util.make_headers is not None, type(sys.modules["urllib3"]).__name__)
        """
    )
    assert out.splitlines() == [
        "[]",
        "Basic dTpw",
        "2026-12-02T10:00:00+00:00",
        "3",
        "True module",
    ]
