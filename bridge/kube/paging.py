"""The list pager: a list of one resource (``bridge.core.resources``: Events, Namespaces), page
by page (``limit`` and ``continue``), as client-go's ``tools/pager`` does it, each page's items
decoded on the way by the resource's decoder.

The list's resourceVersion is its first page's ``metadata.resourceVersion`` (later pages carry
the same snapshot); never one of its items' (a list comes in no RV order). A page without
metadata is a failed answer (``KubeUnavailable``). An expired ``continue`` token (HTTP 410,
etcd compacted the snapshot under the list) raises ``ResourceExpired`` from the page call: the
watcher starts the list over, after a back-off, from a fresh consistent read. client-go's pager
falls back to one unpaged list instead; a list of every Event in a large cluster at once is
what paging is there to avoid.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, NamedTuple, Protocol

from bridge import errors
from bridge.core import events
from bridge.core.events import Event, parse_rv, rv_of
from bridge.core.resources import Resource
from bridge.kube.lines import Skipped


class ListPage(Protocol):
    """One page of the list (``KubeClient.list_page``): ``{"metadata": {...}, "items":
    [raw item, ...]}``. Raises ``errors.KubeError``."""

    async def __call__(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        limit: int,
        cont: str | None = None,
        field_selector: str = "",
    ) -> dict[str, Any]: ...


class Page(NamedTuple):
    resource_version: int | None  # the list's (its first page's); None when it has none
    items: list[tuple[Event, int]]  # each listed object with its own resourceVersion


async def list_pages(
    list_page: ListPage,
    resource: Resource,
    namespace: str | None,
    *,
    limit: int,
    field_selector: str,
    skipped: Skipped,
    only_resource_version: bool = False,
) -> AsyncIterator[Page]:
    """The pages of one list, each as it is answered. An item the resource's decoder refuses or
    without a resourceVersion is handed to ``skipped`` with its reason and left out.

    ``only_resource_version``: one page, its items not read (where to start watching from,
    with ``limit=1``: the cheapest list there is)."""
    cont: str | None = None
    list_rv: int | None = None
    first = True
    while True:
        doc = await list_page(
            resource, namespace, limit=limit, cont=cont, field_selector=field_selector
        )
        meta = doc.get("metadata")
        if not isinstance(meta, dict):
            raise errors.KubeUnavailable("list answer has no metadata")
        if first:
            list_rv = parse_rv(meta.get("resourceVersion"))
            first = False
        if list_rv is None or only_resource_version:
            yield Page(list_rv, [])  # refused by the caller, or all it asked for
            return
        raw_items = doc.get("items")
        listed = raw_items if isinstance(raw_items, list) else ()
        yield Page(list_rv, decode_items(listed, resource, skipped))
        cont = meta.get("continue") or None
        if not isinstance(cont, str) or not cont:
            return


def decode_items(raw_items: Any, resource: Resource, skipped: Skipped) -> list[tuple[Event, int]]:
    out: list[tuple[Event, int]] = []
    from_item = resource.from_item
    for raw in raw_items:
        try:
            item = from_item(raw)
        except events.BadLine as exc:
            skipped("malformed_item", f"{exc}: {str(raw)[:200]}")
            continue
        item_rv = rv_of(item.view)
        if item_rv is None:
            skipped("no_resource_version", raw)
            continue
        out.append((item, item_rv))
    return out
