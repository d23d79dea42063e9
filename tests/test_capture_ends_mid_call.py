"""A capture that ends while an operation on one of its streams is being made.

Another thread may end a capture (``end_capture``, a destroyed origin, the releaser freeing a
forgotten one) at any moment, including between an operation's look at its stream ("is it
capturing?") and what it does about it. The operation must then either run eagerly (the capture
had ended before it looked) or be refused with ``IllegalState`` (it found the capture and the
capture ended under it; see ``capture_forgotten``): never fail with an ``AttributeError`` from a
part that is gone, and never add a node to the graph of a capture that ended.

The race is opened deterministically, without threads: a trace function ends the capture at
the k-th line executed in the operation's own frames (the stream's and the launcher's methods,
none of which runs under the capture lock), for every k until the operation finishes first.
Ending the capture there is exactly what another thread could do at that point.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.launcher import Launcher
from capture_helpers import NBYTES, Baseline, N, affine, no_capture_left
from cleanup import destroy

MAX_LINES = 200  # far more lines than any operation below runs


def _codes(*classes: type) -> frozenset[CodeType]:
    """The code of every plain method of ``classes`` (and of the bodies the enqueues wrap).

    Dunders (a repr may be made while the capture lock is held) and class methods (the null
    stream's factory) are left out: only the frames of the operations themselves are traced.
    """
    codes = set()
    for cls in classes:
        for klass in cls.__mro__:
            if klass is object or klass.__module__.startswith("ahipgraph.core"):
                continue
            for name, member in vars(klass).items():
                if name.startswith("__") or not inspect.isfunction(member):
                    continue
                codes.add(member.__code__)
                codes.add(inspect.unwrap(member).__code__)
    return frozenset(codes)


OPERATION_CODES = _codes(ahg.Stream, Launcher)


def _end_whatever_it_captured(origin: ahg.Stream) -> None:
    """End a capture the operation finished in: a fork's work is unjoined, a graph launch
    invalidated it; either way the capture ends and nothing is left."""
    with contextlib.suppress(ahg.StreamCaptureUnjoined, ahg.StreamCaptureInvalidated):
        origin.end_capture().destroy()


class _EndAtLine:
    """A trace function that ends ``origin``'s capture at the k-th traced line."""

    def __init__(self, origin: ahg.Stream, k: int) -> None:
        self.origin = origin
        self.k = k
        self.lines = 0
        self.fired = False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code in OPERATION_CODES:
            return self._line
        return None

    def _line(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            if self.lines == self.k and not self.fired:
                self.fired = True
                if self.origin.is_capturing() is ahg.CaptureStatus.ACTIVE:
                    _end_whatever_it_captured(self.origin)
            self.lines += 1
        return self._line


@pytest.fixture
def kit(device: ahg.Device) -> Iterator[tuple[ahg.Stream, ahg.Stream, ahg.Event, ahg.DevicePtr]]:
    origin, fork = device.create_stream(), device.create_stream()
    event = device.create_event()
    ptr = device.malloc(NBYTES)
    yield origin, fork, event, ptr
    destroy(origin, fork, event, ptr)


def _operations(
    stream: ahg.Stream, event: ahg.Event, ptr: ahg.DevicePtr, exec_: ahg.GraphExec
) -> dict[str, Callable[[], Any]]:
    host = np.zeros(N, dtype=np.int64)
    return {
        "launch_kernel": lambda: stream.launch_kernel(affine, 1, N, (N, 1, 1, ptr, ptr)),
        "launch_kernel_nowait": lambda: stream.launch_kernel_nowait(
            affine, 1, N, (N, 1, 1, ptr, ptr)
        ),
        "memcpy": lambda: stream.memcpy(ptr, host),
        "memcpy_2d": lambda: stream.memcpy_2d(ptr, 16, host, 16, 16, 2),
        "memset": lambda: stream.memset(ptr, 0, NBYTES),
        "launch_host_func": lambda: stream.launch_host_func(lambda: None),
        "record_event": lambda: stream.record_event(event),
        "write_value_32": lambda: stream.write_value_32(ptr, 5),
        "malloc_async": lambda: stream.malloc_async(64),
        "graph_launch": lambda: exec_.launch(stream),
    }


OPERATIONS = [
    "launch_kernel",
    "launch_kernel_nowait",
    "memcpy",
    "memcpy_2d",
    "memset",
    "launch_host_func",
    "record_event",
    "write_value_32",
    "malloc_async",
    "graph_launch",
]  # the keys of _operations


async def _settle(result: Any, device: ahg.Device) -> str:
    """Say how the operation went; wait for one that ran eagerly, give back what it allocated.

    Work captured before the capture ended (the k-th line came after) returns what a captured
    operation returns: its node is in a graph already destroyed, and it is never waited for.
    """
    if hasattr(result, "node"):
        return "captured"
    if isinstance(result, ahg.DevicePtr):
        await device.synchronize()  # an eager malloc_async is stream-ordered: free after it
        try:
            device.free(result)
        except ahg.InvalidValue:  # an address the capture's graph reserved: gone with it
            return "captured"
        return "ran"
    if result is not None:
        await result
    return "ran"


@pytest.mark.asyncio
@pytest.mark.parametrize("on_fork", [False, True], ids=["origin", "fork"])
@pytest.mark.parametrize("name", OPERATIONS)
async def test_an_operation_runs_eagerly_or_is_refused_when_its_capture_ends_under_it(
    device: ahg.Device,
    kit: tuple[ahg.Stream, ahg.Stream, ahg.Event, ahg.DevicePtr],
    name: str,
    on_fork: bool,
) -> None:
    origin, fork, event, ptr = kit
    graph = ahg.Graph()
    graph.add_empty_node()
    exec_ = graph.instantiate()
    stream = fork if on_fork else origin
    operation = _operations(stream, event, ptr, exec_)[name]
    # A graph launch on a capturing stream is refused with StreamCaptureUnsupported; one that
    # found the capture gone under it is refused so too.
    refused = ahg.StreamCaptureUnsupported if name == "graph_launch" else ahg.IllegalState
    before = Baseline.take(device)
    outcomes: set[str] = set()
    for k in range(MAX_LINES):
        origin.begin_capture()
        if on_fork:
            await origin.record_event(event)
            await fork.wait_event(event)  # the fork joins the capture: no node
        tracer = _EndAtLine(origin, k)
        previous = sys.gettrace()
        sys.settrace(tracer)
        try:
            result = operation()
            if inspect.iscoroutine(result):  # an enqueue; a _nowait twin returned its work
                result = await result
        except refused:
            outcomes.add("refused")
            result = None
        finally:
            sys.settrace(previous)
        if not tracer.fired:  # the operation was over before its k-th line
            _end_whatever_it_captured(origin)
            no_capture_left()
            break
        if result is not None:
            outcomes.add(await _settle(result, device))
        no_capture_left()
    else:
        pytest.fail(f"{name} ran more than {MAX_LINES} traced lines")
    await origin.synchronize()
    await fork.synchronize()
    assert "refused" in outcomes  # the window between the look and the act was reached
    assert Baseline.take(device) == before
    destroy(exec_, graph)
