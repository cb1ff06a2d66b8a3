"""kubernetes_asyncio without the ~1,000 generated model classes neither program uses.

``import kubernetes_asyncio`` (and so ``kubernetes_asyncio.config``) runs the package's
``__init__``, which imports every API module and every model class: more memory than the rest
of the process together (docs/performance.md), for objects neither the bridge nor the
remediation worker builds (``k8s_event_common.kube.connection`` reads raw responses). Here the
packages ``kubernetes_asyncio``, ``.client``, ``.client.api`` and ``.client.models`` are
registered as modules whose ``__init__`` has not run yet; their submodules import as usual,
also when looked up as an attribute (``from kubernetes_asyncio.client import rest``). Any other
name looked up on one of them runs its real ``__init__`` first (once), so code that wants the
whole client still gets it.

Three more modules its client and config import but never use on this path (2.4 MB
together, measured: docs/performance.md) are not imported with them: while kubernetes_asyncio
is imported, ``urllib3`` (basic auth's header), ``dateutil.parser`` (model dates) and
``multiprocessing.pool`` (``async_req``) are stand-ins in ``sys.modules``, gone once the import
is done. What kubernetes_asyncio took from them (the stand-in module, ``parse``,
``ThreadPool``) imports the real module when it is first used.

If kubernetes_asyncio was imported before this module, nothing is changed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

_PACKAGES = (
    "kubernetes_asyncio",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.api",
    "kubernetes_asyncio.client.models",
)
# name -> the submodule that defines it, for the names the programs' imports need
_CHEAP = {
    "kubernetes_asyncio.client": {
        "ApiClient": "kubernetes_asyncio.client.api_client",
        "Configuration": "kubernetes_asyncio.client.configuration",
        "CoreV1Api": "kubernetes_asyncio.client.api.core_v1_api",
        "CoordinationV1Api": "kubernetes_asyncio.client.api.coordination_v1_api",
    },
}


def _lazy_package(name: str) -> None:
    parent, _, last = name.rpartition(".")
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not an importable package")
    module = importlib.util.module_from_spec(spec)
    cheap = _CHEAP.get(name, {})
    loaded = False

    def __getattr__(attr: str) -> Any:
        nonlocal loaded
        if attr in cheap:
            value = getattr(importlib.import_module(cheap[attr]), attr)
        elif not attr.startswith("__") and importlib.util.find_spec(f"{name}.{attr}"):
            value = importlib.import_module(f"{name}.{attr}")  # a submodule
        elif not loaded:
            loaded = True
            assert spec.loader is not None
            spec.loader.exec_module(module)  # the real __init__, once
            value = module.__dict__.get(attr)
            if value is None:
                raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        else:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        setattr(module, attr, value)
        return value

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = module
    if parent:
        setattr(sys.modules[parent], last, module)


def _parse(*args: Any, **kwargs: Any) -> Any:
    from dateutil.parser import parse  # type: ignore[import-untyped]

    return parse(*args, **kwargs)


def _thread_pool(*args: Any, **kwargs: Any) -> Any:
    from multiprocessing.pool import ThreadPool

    return ThreadPool(*args, **kwargs)


# module -> the names kubernetes_asyncio imports from it (``from m import name``), as stand-ins
_STAND_INS: dict[str, dict[str, Any]] = {
    "urllib3": {},  # ``import urllib3``: only ``urllib3.util.make_headers`` is ever looked up
    "dateutil.parser": {"parse": _parse},
    "multiprocessing.pool": {"ThreadPool": _thread_pool},
}


def _stand_in(name: str, names: dict[str, Any]) -> types.ModuleType:
    """A module that is not ``name`` but becomes it: any other attribute looked up on it is
    the real module's (imported then)."""
    module = types.ModuleType(name, f"a stand-in for {name} (k8s_event_common.kube.lean)")
    vars(module).update(names)

    def __getattr__(attr: str) -> Any:
        if sys.modules.get(name) is module or attr.startswith("__"):
            raise AttributeError(f"module {name!r} (a stand-in) has no attribute {attr!r}")
        return getattr(importlib.import_module(name), attr)

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


def _import_with_stand_ins() -> None:
    placed = {}
    for name, names in _STAND_INS.items():
        if name not in sys.modules:
            placed[name] = sys.modules[name] = _stand_in(name, names)
    try:
        importlib.import_module("kubernetes_asyncio.config")  # a submodule import: no __getattr__
        importlib.import_module("kubernetes_asyncio.client.api_client")
    finally:
        for name, module in placed.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


if "kubernetes_asyncio" not in sys.modules:
    for _name in _PACKAGES:
        _lazy_package(_name)
    _import_with_stand_ins()

from kubernetes_asyncio import client, config  # noqa: E402
from kubernetes_asyncio.config import incluster_config  # noqa: E402

__all__ = ["client", "config", "incluster_config"]
