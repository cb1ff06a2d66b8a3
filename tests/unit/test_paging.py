"""The list pager (bridge.kube.paging) against a scripted page function: limit and
continue, the list's resourceVersion, items decoded or skipped, failures as they come."""

from __future__ import annotations

import msgspec
import pytest

from bridge import errors
from bridge.core.resources import EVENTS
from bridge.kube.paging import list_pages


def item(name, rv):
    return msgspec.json.encode({"metadata": {"name": name, "resourceVersion": str(rv)}})


class Pages:
    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    async def __call__(self, resource, namespace, *, limit, cont=None, field_selector=""):
        assert resource is EVENTS
        self.calls.append((namespace, limit, cont, field_selector))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def page(rv, items, cont=None):
    meta = {} if rv is None else {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    return {"metadata": meta, "items": items}


async def collect(pages, **kw):
    skipped = []
    kw = {"limit": 2, "field_selector": "type=Warning", **kw}
    got = [
        p async for p in list_pages(pages, EVENTS, "ns", skipped=lambda *a: skipped.append(a), **kw)
    ]
    return got, skipped


async def test_pages_follow_the_continue_token_and_carry_the_first_pages_rv():
    pages = Pages(page("100", [item("a", 5), item("b", 90)], "t1"), page("101", [item("c", 7)]))
    got, skipped = await collect(pages)
    assert pages.calls == [("ns", 2, None, "type=Warning"), ("ns", 2, "t1", "type=Warning")]
    assert [
        (p.resource_version, [(e.view.metadata.name, rv) for e, rv in p.items]) for p in got
    ] == [
        (100, [("a", 5), ("b", 90)]),
        (100, [("c", 7)]),  # one snapshot: the list's resourceVersion is the first page's
    ]
    assert skipped == []


async def test_only_the_resource_version_reads_one_page_and_no_item():
    pages = Pages(page("100", [b"not json"], "more"))
    got, skipped = await collect(pages, limit=1, only_resource_version=True)
    assert [(p.resource_version, p.items) for p in got] == [(100, [])]
    assert len(pages.calls) == 1 and skipped == []


@pytest.mark.parametrize("rv", [None, "", "12a", "-1"])
async def test_a_list_without_a_parseable_rv_ends_with_none_and_reads_no_item(rv):
    pages = Pages(page(rv, [b"not json"], "more"))
    got, skipped = await collect(pages)
    assert [(p.resource_version, p.items) for p in got] == [(None, [])]  # the caller refuses it
    assert len(pages.calls) == 1 and skipped == []


async def test_items_that_are_no_event_or_have_no_rv_are_skipped_with_their_reason():
    bad_rv = msgspec.json.encode({"metadata": {"name": "x", "resourceVersion": "x1"}})
    pages = Pages(page("50", [b"[1]", None, bad_rv, item("good", 40)]))
    got, skipped = await collect(pages)
    assert [[rv for _, rv in p.items] for p in got] == [[40]]
    assert [reason for reason, _ in skipped] == [
        "malformed_item",
        "malformed_item",
        "no_resource_version",
    ]


async def test_a_page_without_metadata_is_a_failed_answer():
    pages = Pages({"items": []})
    with pytest.raises(errors.KubeUnavailable, match="no metadata"):
        await collect(pages)


async def test_an_expired_continue_token_ends_the_list_with_the_410():
    pages = Pages(page("100", [item("a", 1)], "t"), errors.ResourceExpired("410"))
    got = []
    with pytest.raises(errors.ResourceExpired):
        async for p in list_pages(pages, EVENTS, None, limit=2, field_selector="", skipped=print):
            got.append(p)
    assert len(got) == 1  # the first page was handed on before the 410
