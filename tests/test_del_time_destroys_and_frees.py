"""Handles destroyed and memory freed from ``__del__``, when the collector runs it.

``destroy()`` called from the ``__del__`` of an object collected in the same cycle.

A program's wrapper that owns a handle and destroys it in its ``__del__`` is a common shape.
When wrapper and handle die in one reference cycle, the collector runs the handle's finalizer
(a weak-reference callback: it retires the handle and frees it, with a warning) before the
wrapper's ``__del__``, which still reaches the handle and calls ``destroy()``. That destroy
raised "was already destroyed" (a handle whose state still said open; a graph node, "was
destroyed" with its collected graph), reported as an exception ignored in ``__del__``. The
handle was freed already: the destroy is a no-op now, as
a user object's release in the same position already was. A handle destroyed twice by the
program still raises (``tests/test_lifecycle.py``).

And the collector may run at any allocation, also one made under a lock of the runtime: a
``__del__`` it runs there that destroys a stream or frees memory of the same device, or
releases the same user object, must not find that lock held by its own thread (it hung the
program).
"""

from __future__ import annotations

import builtins
import functools
import gc
import sys
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.core import lifecycle
from ahipgraph.device import memory as memory_module
from ahipgraph.lifetime import user_object as user_object_module


class InCycle:
    """Calls ``on_del`` in ``__del__`` (destroys a handle, frees memory, releases a reference,
    as a program's wrapper does) and is its own reference cycle, so only the collector frees it
    and what ``on_del`` holds. An error goes to ``errors`` when given."""

    def __init__(
        self, on_del: Callable[[], object], errors: list[BaseException] | None = None
    ) -> None:
        self.on_del = on_del
        self.errors = errors
        self.me = self

    def __del__(self) -> None:
        try:
            self.on_del()
        except BaseException as error:  # the test reads it
            if self.errors is None:
                raise
            self.errors.append(error)


def _exec(device: ahg.Device) -> ahg.GraphExec:
    graph = ahg.Graph()
    graph.add_empty_node()
    try:
        return graph.instantiate()
    finally:
        graph.destroy()


MAKERS: dict[str, Callable[[ahg.Device], Any]] = {
    "stream": lambda device: device.create_stream(),
    "event": lambda device: device.create_event(),
    "graph": lambda device: ahg.Graph(),
    "exec": _exec,
    "node": lambda device: ahg.Graph().add_empty_node(),  # its graph goes in the cycle too
}


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_handle_destroyed_in_the_del_of_its_cycle_mate_is_no_error(
    device: ahg.Device, kind: str
) -> None:
    errors: list[BaseException] = []
    unraisable: list[Any] = []
    InCycle(MAKERS[kind](device).destroy, errors)  # garbage at once, with its handle
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        with warnings.catch_warnings():
            # The finalizer ran first: the handle was collected without destroy(), and says so.
            warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
            gc.collect()
            ahg.collect_forgotten()
    finally:
        sys.unraisablehook = hook
    assert errors == []
    assert unraisable == []


@pytest.mark.timeout(30)
@pytest.mark.parametrize("inside", ["append", "__iter__"])
def test_a_collection_inside_the_devices_stream_set_may_destroy_one_of_its_streams(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch, inside: str
) -> None:
    # The collector may run at any allocation, and the device's set of streams allocates under
    # its lock (a weak reference per stream added, a list per snapshot). A __del__ the
    # collection runs there that destroys a stream of the same device took that lock again on
    # the same thread: the program hung for good. The test makes the collection run at the
    # allocation inside the lock.
    victim = device.create_stream()
    original = getattr(lifecycle.WeakList, inside)

    def collecting(self: Any, *args: Any) -> Any:
        gc.collect()
        return original(self, *args)

    monkeypatch.setattr(lifecycle.WeakList, inside, collecting)
    InCycle(victim.destroy)  # garbage at once; the victim stays reachable from this test
    if inside == "append":
        made = device.create_stream()
    else:
        made = None
        assert victim not in device.streams
    monkeypatch.undo()
    assert not victim.alive
    assert victim not in device.streams
    if made is not None:
        made.destroy()


@pytest.mark.timeout(30)
def test_a_collection_inside_malloc_may_free_memory_of_the_same_device(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    # malloc makes its allocation's record under the memory's lock, so the collector may run
    # there; a buffer object it collects frees its pointer, which took the lock again on the same
    # thread: the program hung for good (it did with ordinary collector thresholds, after a
    # few thousand such buffers). The test makes the collection run at that allocation.
    before = device.memory_info()
    InCycle(functools.partial(device.free, device.malloc(64)))  # a buffer object, collected
    record = memory_module.Allocation

    class CollectingRecord(record):  # type: ignore[misc, valid-type]
        __slots__ = ()

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            gc.collect()
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(memory_module, "Allocation", CollectingRecord)
    ptr = device.malloc(128)
    monkeypatch.undo()
    device.free(ptr)
    assert device.memory_info() == before


@pytest.mark.timeout(30)
@pytest.mark.parametrize("call", ["destroy", "statistics"])
def test_a_collection_inside_a_user_objects_lock_may_release_that_object(
    monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    # destroy() and statistics() add up the owners' references under the object's lock (an
    # allocation), so the collector may run there; a holder it collects releases the same
    # object, which took the lock again on the same thread: the program hung for good. The
    # test makes the collection run at that allocation.
    ran: list[str] = []
    obj = ahg.UserObject(ran.append, data="destructor", initial_refcount=3)
    InCycle(obj.release)  # holds one reference, given back when collected

    def collecting_sum(values: Any) -> int:
        gc.collect()
        return builtins.sum(values)

    monkeypatch.setattr(user_object_module, "sum", collecting_sum, raising=False)
    if call == "destroy":
        obj.destroy()  # the program's references: 3, less the one the holder gave back
        assert ran == ["destructor"]
    else:
        assert obj.statistics().refcount == 2  # what is left after the nested release
        monkeypatch.undo()
        obj.release(2)
        assert ran == ["destructor"]
