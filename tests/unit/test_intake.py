from bridge.core import events
from bridge.core.converting import Converter
from bridge.core.filtering import Filter
from bridge.core.progress import Progress
from bridge.core.queueing import BoundedQueue
from bridge.metrics import Metrics
from bridge.runtime.intake import Intake
from bridge.settings import FilterSettings


def intake(**filter_settings):
    m = Metrics()
    p = Progress(1)
    q = BoundedQueue(10, 1 << 20)
    return (
        Intake(
            "*",
            p,
            Filter(FilterSettings(**filter_settings)),
            Converter("c", "k8s.events", "structured"),
            q,
            m,
        ),
        p,
        q,
        m,
    )


def ev(rv, **over):
    obj = {
        "metadata": {"uid": "u", "resourceVersion": str(rv), "namespace": "ns"},
        "reason": "BackOff",
        "type": "Warning",
        "involvedObject": {"kind": "Pod", "name": "p"},
    }
    obj.update(over)
    return events.from_obj(obj)


async def test_published_item_holds_the_checkpoint_until_acked():
    it, p, q, _ = intake()
    await it.items([("ADDED", ev(5), 5)])
    assert p.safe_rv == 1 and len(q) == 1
    out = q.get_nowait()
    p.ack(out.entry)
    assert p.safe_rv == 5


async def test_filtered_item_moves_the_checkpoint_at_once():
    it, p, q, m = intake(reasons=["OOMKilling"])
    await it.items([("ADDED", ev(5), 5)])
    assert p.safe_rv == 5 and len(q) == 0
    assert m.filtered.value == 1


async def test_item_that_breaks_the_converter_is_skipped_and_counted():
    it, p, q, m = intake()
    await it.items([("ADDED", ev(6, metadata={"uid": "u"}), 6)])  # no resourceVersion in the object
    await it.items([("ADDED", ev(7, involvedObject=["odd"], reason={"x": 1}), 7)])
    assert len(q) == 1  # the second still converts: odd fields become empty tokens
    assert m.skipped.labels("invalid_event")._value.get() == 1
    p.ack(q.get_nowait().entry)
    assert p.safe_rv == 7
