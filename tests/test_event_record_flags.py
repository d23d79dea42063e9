"""``record_event`` flags (``hipEventRecordWithFlags``).

``wait_event`` took HIP's flags (``hipEventWaitExternal`` adds an EventWait node to a
capture), but ``record_event`` took none: ``hipEventRecordExternal`` could not be asked for,
and a captured record could never become an EventRecord node. HIP accepts exactly 0 and 1,
refuses anything else with InvalidValue before it looks at the event or the stream, and with
the external flag on a capturing stream adds an EventRecord node after the stream's
dependencies; the event still remembers the dependencies from before that node, so a stream
that waits on it forks from the same place as with a plain record.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy

NOT_FLAGS = [2, -1, True, 1.0, None, "1"]


@ahg.kernel
def _add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int32]) -> None:
    out[t.ids] += 1


@pytest.mark.asyncio
@pytest.mark.parametrize("flags", NOT_FLAGS)
async def test_a_bad_record_flag_is_invalid_value_and_records_nothing(
    device: ahg.Device, flags: object
) -> None:
    stream = device.create_stream()
    event = device.create_event()
    with pytest.raises(ahg.InvalidValue, match="not an event record flag"):
        await stream.record_event(event, flags)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue, match="not an event record flag"):
        stream.record_event_nowait(event, flags=flags)  # type: ignore[arg-type]
    assert stream.statistics().submitted == 0
    stream.begin_capture()
    with pytest.raises(ahg.InvalidValue):
        await stream.record_event(event, flags)  # type: ignore[arg-type]
    assert stream.capture_info().status is ahg.CaptureStatus.ACTIVE  # a failed call: no change
    graph = stream.end_capture()
    assert graph.nodes() == []
    destroy(graph, event, stream)


@pytest.mark.asyncio
async def test_the_flag_is_checked_before_the_event_as_hip_does(device: ahg.Device) -> None:
    stream = device.create_stream()
    event = device.create_event()
    event.destroy()
    with pytest.raises(ahg.InvalidValue):
        await stream.record_event(event, 7)
    with pytest.raises(ahg.InvalidHandle):
        await stream.record_event(event, 1)
    stream.destroy()


@pytest.mark.asyncio
async def test_an_external_record_outside_capture_records_like_a_plain_one(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    start, end = device.create_event(), device.create_event()
    ptr = device.malloc(64)
    await stream.record_event(start, flags=1)
    await stream.launch_kernel(_add_one, 1, 16, (ptr,))
    await stream.record_event(end, 1)
    await end.synchronize()
    assert start.query()
    assert end.query()
    assert ahg.elapsed_time(start, end) > 0
    assert device.view(ptr, np.int32).tolist() == [1] * 16
    destroy(start, end, stream)
    device.free(ptr)


@pytest.mark.asyncio
async def test_an_external_record_in_capture_is_an_event_record_node_after_the_work(
    device: ahg.Device,
) -> None:
    stream, side = device.create_stream(), device.create_stream()
    fork, join = device.create_event(), device.create_event()
    ptr = device.malloc(64)
    stream.begin_capture()
    first = (await stream.launch_kernel(_add_one, 1, 16, (ptr,))).node
    await stream.record_event(fork, flags=1)
    (record,) = stream.capture_info().dependencies
    assert record.type is ahg.NodeType.EventRecord
    assert record.dependencies() == [first]
    # The fork starts where the record was made, not after the record node (as in HIP).
    await side.wait_event(fork)
    assert side.capture_info().dependencies == (first,)
    await side.record_event(join)  # a plain record: no node
    await stream.wait_event(join)
    graph = stream.end_capture()
    assert [node.type for node in graph.nodes()] == [ahg.NodeType.Kernel, ahg.NodeType.EventRecord]
    assert graph.edges() == [(first, record)]
    # Launched, the graph records the event after the kernel ran.
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    assert fork.query()
    assert device.view(ptr, np.int32).tolist() == [1] * 16
    destroy(graph_exec, graph, fork, join, side, stream)
    device.free(ptr)


@pytest.mark.asyncio
async def test_an_external_record_of_a_destroyed_event_changes_nothing(device: ahg.Device) -> None:
    stream = device.create_stream()
    event = device.create_event()
    event.destroy()
    stream.begin_capture()
    with pytest.raises(ahg.InvalidHandle):
        await stream.record_event(event, 1)
    assert stream.capture_info().status is ahg.CaptureStatus.ACTIVE
    assert stream.capture_info().dependencies == ()
    graph = stream.end_capture()
    assert graph.nodes() == []
    destroy(graph, stream)


class _External:
    """The external flag (1) as an integer that is not an ``int``: only ``__index__`` says 1."""

    def __index__(self) -> int:
        return 1


@pytest.mark.asyncio
async def test_an_external_flag_given_as_any_integer_makes_its_node(device: ahg.Device) -> None:
    """The flags were checked through ``__index__`` but compared with ``==``, which for such
    an object is identity: the capture made no EventRecord or WaitEvent node."""
    stream = device.create_stream()
    event = device.create_event()
    out = device.malloc(64)
    stream.begin_capture()
    await stream.memset(out, 1, 8)
    await stream.record_event(event, _External())
    await stream.wait_event(event, _External())
    graph = stream.end_capture()
    assert sorted(node.type.name for node in graph.nodes()) == [
        "EventRecord",
        "Memset",
        "WaitEvent",
    ]
    graph.destroy()
    stream.destroy()
    event.destroy()
    device.free(out)
