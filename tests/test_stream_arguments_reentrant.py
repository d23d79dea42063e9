"""Stream operations whose own argument checks destroy the stream or begin or end a capture.

An enqueue checks its stream first (HIP's order), then converts its arguments, which runs user
code: a size's or a kernel argument's ``__index__``. That code may destroy the stream, begin a
capture or end the one the stream is in, or replace the devices. The operation must then be
refused, with the error the stream's state calls for, rather than enqueue work on a destroyed
or capturing stream, park on a destroyed stream's full ring, add a node to the graph of a
capture that ended, or allocate for a device or stream that is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.testing import registry_statistics
from cleanup import destroy


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


class Reentrant:
    """An integer argument whose first conversion runs ``action`` (user code calling back)."""

    def __init__(self, value: int, action: Callable[[], object]) -> None:
        self.value = value
        self.action: Callable[[], object] | None = action

    def __index__(self) -> int:
        action, self.action = self.action, None
        if action is not None:
            action()
        return self.value

    __int__ = __index__


Operation = Callable[[ahg.Stream, ahg.DevicePtr, ahg.DevicePtr, Callable[[int], Any]], Any]

OPERATIONS: dict[str, Operation] = {
    "launch_kernel grid": lambda s, a, b, i: s.launch_kernel(put, i(1), 1, (1, a)),
    "launch_kernel argument": lambda s, a, b, i: s.launch_kernel(put, 1, 1, (i(1), a)),
    "launch_kernel shared_mem": lambda s, a, b, i: s.launch_kernel(
        put, 1, 1, (1, a), shared_mem=i(0)
    ),
    "memcpy nbytes": lambda s, a, b, i: s.memcpy(b, a, i(8)),
    "memset value": lambda s, a, b, i: s.memset(a, i(1), 8),
    "memset count": lambda s, a, b, i: s.memset(a, 1, i(8)),
    "memcpy_2d width": lambda s, a, b, i: s.memcpy_2d(b, 8, a, 8, i(8), 2),
    "memcpy_peer nbytes": lambda s, a, b, i: s.memcpy_peer(b, 0, a, 0, i(8)),
    "write_value_32 value": lambda s, a, b, i: s.write_value_32(a, i(1)),
    "wait_value_32 value": lambda s, a, b, i: s.wait_value_32(a, i(0)),
}


class _Nowait:
    """A stream whose operations are its ``_nowait`` twins."""

    def __init__(self, stream: ahg.Stream) -> None:
        self.stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, f"{name}_nowait")


@pytest.mark.asyncio
@pytest.mark.parametrize("nowait", [False, True], ids=["await", "nowait"])
@pytest.mark.parametrize("name", sorted(OPERATIONS))
async def test_an_eager_enqueue_whose_argument_destroys_its_stream_enqueues_nothing(
    device: ahg.Device, name: str, nowait: bool
) -> None:
    stream = device.create_stream()
    a, b = device.malloc(64), device.malloc(64)

    async def call() -> None:
        target: Any = stream
        if nowait:  # the same operation through its _nowait twin, under the plain name
            target = _Nowait(stream)
        result = OPERATIONS[name](target, a, b, lambda value: Reentrant(value, stream.destroy))
        if not nowait:
            await result

    with pytest.raises(ahg.ContextIsDestroyed, match="destroyed"):
        await call()
    assert stream.statistics().submitted == 0
    assert device.statistics().in_flight == 0
    destroy(a, b)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("action", "error"),
    [("destroy", ahg.ContextIsDestroyed), ("begin_capture", ahg.IllegalState)],
)
async def test_malloc_async_whose_size_destroys_or_captures_its_stream_allocates_nothing(
    device: ahg.Device, action: str, error: type[ahg.HipError]
) -> None:
    stream = device.create_stream()
    before = device.memory_info()
    with pytest.raises(error):
        await stream.malloc_async(Reentrant(64, getattr(stream, action)))
    assert device.memory_info() == before
    assert device.statistics().memory.allocations == 0
    if stream.alive:
        graph = stream.end_capture()
        assert graph.nodes() == []
        destroy(graph, stream)


CAPTURED: dict[str, Operation] = {
    **OPERATIONS,
    "malloc_async nbytes": lambda s, a, b, i: s.malloc_async(i(64)),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(CAPTURED))
async def test_a_captured_operation_whose_argument_ends_the_capture_adds_no_node(
    device: ahg.Device, name: str
) -> None:
    """The capture lock is re-entrant, so ``end_capture`` from an argument's ``__index__``
    ends the capture in the middle of the operation; the node was added to the graph the
    capture had already handed over."""
    stream = device.create_stream()
    a, b = device.malloc(64), device.malloc(64)
    stream.begin_capture()
    ended: list[ahg.Graph] = []
    with pytest.raises(ahg.IllegalState, match="ended while this call was being made"):
        await CAPTURED[name](
            stream, a, b, lambda v: Reentrant(v, lambda: ended.append(stream.end_capture()))
        )
    (graph,) = ended
    assert graph.nodes() == []
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    # The stream works eagerly again.
    await stream.memset(a, 7, 8)
    await stream.synchronize()
    destroy(graph, stream, a, b)


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(CAPTURED))
async def test_a_captured_operation_whose_argument_destroys_its_stream_says_so(
    device: ahg.Device, name: str
) -> None:
    """Destroying the origin ends the capture; the operation used to fail with the graph
    layer's ``InvalidValue`` about a destroyed graph the user never saw."""
    stream = device.create_stream()
    a, b = device.malloc(64), device.malloc(64)
    stream.begin_capture()
    with pytest.raises(ahg.IllegalState, match="ended while this call was being made"):
        await CAPTURED[name](stream, a, b, lambda v: Reentrant(v, stream.destroy))
    assert not stream.alive
    destroy(a, b)


def test_malloc_whose_size_replaces_the_devices_allocates_nothing() -> None:
    old = ahg.get_device(0)
    with pytest.raises(ahg.InvalidDevice, match="no longer"):
        old.malloc(Reentrant(64, lambda: ahg.configure_devices(1)))
    assert old.statistics().memory.allocations == 0
    assert old.memory_info()[0] == old.memory_info()[1]


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("ending", "error"),
    [("end_capture", ahg.IllegalState), ("destroy", ahg.ContextIsDestroyed)],
)
async def test_update_capture_dependencies_whose_iterable_ends_the_capture_is_refused(
    device: ahg.Device, ending: str, error: type[ahg.HipError]
) -> None:
    """The nodes are read under the (re-entrant) capture lock, after the status check: a
    generator that ended the capture got a success for an update that went nowhere, and one
    that destroyed the stream an ``InvalidValue`` about the graph's node count."""
    stream = device.create_stream()
    a = device.malloc(64)
    stream.begin_capture()
    work = await stream.memset(a, 1, 8)
    ended: list[ahg.Graph] = []

    def nodes() -> Iterator[ahg.GraphNode]:
        assert work.node is not None
        yield work.node
        if ending == "end_capture":
            ended.append(stream.end_capture())
        else:
            stream.destroy()

    with pytest.raises(error):
        stream.update_capture_dependencies(nodes(), ahg.CaptureDependencies.SET)
    assert stream.alive == (ending == "end_capture")
    destroy(*ended, *([stream] if stream.alive else []), a)


def test_create_stream_whose_priority_replaces_the_devices_makes_no_stream() -> None:
    old = ahg.get_device(0)
    before = registry_statistics()["stream"]
    with pytest.raises(ahg.InvalidDevice, match="no longer"):
        old.create_stream(priority=Reentrant(0, lambda: ahg.configure_devices(1)))
    assert old.streams == ()
    assert registry_statistics()["stream"] == before


FULL_RING: dict[str, Callable[[ahg.Stream, ahg.Event, ahg.DevicePtr, Any], Any]] = {
    "launch_kernel argument": lambda s, e, a, i: s.launch_kernel(put, 1, 1, (i(1), a)),
    "memset value": lambda s, e, a, i: s.memset(a, i(1), 8),
    "memcpy nbytes": lambda s, e, a, i: s.memcpy(a + 8, a, i(8)),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("nowait", [False, True], ids=["await", "nowait"])
@pytest.mark.parametrize("name", sorted(FULL_RING))
async def test_an_enqueue_on_a_full_ring_whose_argument_destroys_its_stream_does_not_park(
    name: str, nowait: bool
) -> None:
    """The checks made before parking converted the argument; the call then parked on the
    destroyed stream's ring until a packet retired (for good, with the ring held) and only
    then reported the stream; its ``_nowait`` twin reported ``NotReady``."""
    ahg.configure_devices(1, ahg.DeviceProperties(hardware_queue_capacity=2))
    device = ahg.get_device(0)
    stream = device.create_stream()
    event = device.create_event()
    a = device.malloc(64)
    held = ahg.testing.HeldKernel()
    await held.launch(stream)
    await stream.record_event(event)  # pending behind the kernel: the ring is full

    def call() -> None:
        target: Any = _Nowait(stream) if nowait else stream
        result = FULL_RING[name](target, event, a, lambda v: Reentrant(v, stream.destroy))
        if not nowait:
            # One step of the coroutine: refused there, never having parked (the kernel is
            # released only later, so a parked call would wait for it).
            try:
                result.send(None)
            finally:
                result.close()

    with pytest.raises(ahg.ContextIsDestroyed, match="destroyed"):
        call()
    assert stream.statistics().submitted == 2
    held.release()
    await device.synchronize()
    destroy(event, a)


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(OPERATIONS))
async def test_an_eager_enqueue_whose_argument_begins_a_capture_on_its_stream_is_refused(
    device: ahg.Device, name: str
) -> None:
    """The work ran eagerly on a stream that was capturing by then; in HIP the capture began
    before the call (its arguments are evaluated first), so it is refused, as a capture that
    ends under a call is, rather than run outside the capture it now belongs to."""
    stream = device.create_stream()
    a, b = device.malloc(64), device.malloc(64)
    with pytest.raises(ahg.IllegalState, match="a capture began"):
        await OPERATIONS[name](stream, a, b, lambda v: Reentrant(v, stream.begin_capture))
    assert stream.statistics().submitted == 0
    graph = stream.end_capture()
    assert graph.nodes() == []
    destroy(graph, stream, a, b)


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(OPERATIONS))
async def test_a_null_stream_enqueue_whose_argument_begins_a_blocking_capture_is_refused(
    device: ahg.Device, name: str
) -> None:
    """HIP's implicit rule: no null-stream work while a blocking stream of its device
    captures. The call looked at the null stream before its argument began the capture."""
    capturing = device.create_stream()
    a, b = device.malloc(64), device.malloc(64)
    null = device.null_stream
    with pytest.raises(ahg.StreamCaptureImplicit):
        await OPERATIONS[name](null, a, b, lambda v: Reentrant(v, capturing.begin_capture))
    assert null.statistics().submitted == 0
    graph = capturing.end_capture()
    destroy(graph, capturing, a, b)


@pytest.mark.asyncio
async def test_malloc_whose_size_begins_a_global_capture_is_refused(device: ahg.Device) -> None:
    """``malloc`` is unsafe while a GLOBAL capture is in progress; the capture began in the
    size's ``__index__``, after the call's capture check, and the memory was allocated."""
    stream = device.create_stream()
    before = device.memory_info()
    with pytest.raises(ahg.StreamCaptureUnsupported):
        device.malloc(Reentrant(64, stream.begin_capture))
    assert device.memory_info() == before
    assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    stream.destroy()
