"""Lifetimes: what a forgotten handle's warning tells the user to
do, user objects owned through a child graph's embedded copy, and user callbacks that re-enter
the library or raise.
"""

from __future__ import annotations

import asyncio
import re
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def nothing(t: ahg.Threads) -> None:
    pass


def _executable() -> ahg.GraphExec:
    with ahg.Graph() as graph:
        graph.add_empty_node()
        return graph.instantiate()


MAKERS: dict[str, Callable[[ahg.Device], Any]] = {
    "stream": lambda device: device.create_stream(),
    "event": lambda device: device.create_event(),
    "graph": lambda device: ahg.Graph(),
    "graph exec": lambda device: _executable(),
    "user object": lambda device: ahg.UserObject(lambda data: None),
}


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_forgotten_handle_s_warning_names_a_call_the_handle_has(
    kind: str, device: ahg.Device
) -> None:
    """A forgotten user object was reported as "dropped without destroy() ... (destroy it, or
    use it in a `with` block)": a user object has neither; it ends with ``release()``."""
    box = [MAKERS[kind](device)]
    handle_type = type(box[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        box.clear()
        ahg.collect_forgotten()
    (warning,) = [w for w in caught if issubclass(w.category, ahg.ForgottenHandleWarning)]
    text = str(warning.message)
    assert text.startswith(f"unclosed {kind} ")
    match = re.search(r"dropped without (\w+)\(\)", text)
    assert match is not None, text
    assert callable(getattr(handle_type, match.group(1), None)), text
    if "`with`" in text:
        assert hasattr(handle_type, "__enter__"), text
        assert hasattr(handle_type, "__exit__"), text


# -- user objects through a child graph's embedded copy ---------------------------------------


def test_a_user_object_moved_into_an_embedded_child_graph_lives_until_its_last_owner(
    device: ahg.Device,
) -> None:
    """The embedded copy of a child-graph node is a graph users may edit (HIP's
    ``hipGraphChildGraphNodeGetGraph``); a user object it owns is carried into clones and
    executables and its destructor runs exactly once, when the last of them goes."""
    ran: list[str] = []
    child = ahg.Graph()
    child.add_empty_node()
    graph = ahg.Graph()
    node = graph.add_child_graph_node(child)
    embedded = node.params.graph
    user_object = ahg.UserObject(ran.append, "destructor")
    embedded.retain_user_object(user_object, move=True)
    exec_ = graph.instantiate()
    clone = graph.clone()
    assert user_object.statistics().refcount == 3
    graph.destroy()
    clone.destroy()
    assert ran == []
    exec_.destroy()
    assert ran == ["destructor"]
    assert not user_object.alive
    destroy(child)


@pytest.mark.parametrize("how", ["destroy the node", "set_child_graph"])
def test_a_user_object_of_an_embedded_copy_goes_with_that_copy(how: str) -> None:
    ran: list[str] = []
    first, second = ahg.Graph(), ahg.Graph()
    first.add_empty_node()
    second.add_empty_node()
    graph = ahg.Graph()
    node = graph.add_child_graph_node(first)
    node.params.graph.retain_user_object(ahg.UserObject(ran.append, "gone"), move=True)
    if how == "destroy the node":
        node.destroy()
    else:
        node.set_child_graph(second)
    assert ran == ["gone"]
    destroy(graph, first, second)


def test_an_embedded_copy_is_destroyed_through_its_node_only() -> None:
    child = ahg.Graph()
    child.add_empty_node()
    graph = ahg.Graph()
    node = graph.add_child_graph_node(child)
    embedded = node.params.graph
    with pytest.raises(ahg.InvalidValue, match="destroy that node"):
        embedded.destroy()
    assert embedded.alive
    assert embedded.owner_node == node
    with pytest.raises(ahg.NotSupported):
        embedded.add_mem_alloc_node(64)
    assert embedded.statistics().nodes == 1
    destroy(graph, child)


# -- user callbacks that re-enter or raise ----------------------------------------------------


@pytest.mark.asyncio
async def test_a_host_function_destroying_its_own_stream_lets_the_stream_finish(
    device: ahg.Device,
) -> None:
    """``hipStreamDestroy`` from inside the stream's own callback: the callback completes, the
    work queued behind it still runs, and the stream ends destroyed."""
    stream = device.create_stream()
    ran: list[str] = []
    first = await stream.launch_host_func(stream.destroy)
    behind = await stream.launch_host_func(ran.append, "behind")
    await first
    await behind
    assert ran == ["behind"]
    assert not stream.alive
    with pytest.raises(ahg.ContextIsDestroyed):
        await stream.synchronize()
    await device.synchronize()


@pytest.mark.asyncio
async def test_a_host_function_querying_its_own_stream_sees_it_busy(device: ahg.Device) -> None:
    stream = device.create_stream()
    seen: list[bool] = []
    await (await stream.launch_host_func(lambda: seen.append(stream.query())))
    assert seen == [False]
    assert stream.query()
    destroy(stream)


class _Custom(BaseException):
    """A BaseException that is neither an interrupt nor a system exit."""


@pytest.mark.asyncio
@pytest.mark.parametrize("error", [RuntimeError("plain"), _Custom("custom")])
async def test_a_raising_host_node_fails_its_launch_and_the_executable_launches_again(
    device: ahg.Device, error: BaseException
) -> None:
    calls: list[int] = []

    def host() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise error

    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_host_node(host)
    exec_ = graph.instantiate()
    before = exec_.statistics().signal_pool
    with pytest.raises(ahg.LaunchFailure, match=type(error).__name__):
        await (await exec_.launch(stream))
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()  # the failure is the stream's too, reported once
    await stream.synchronize()
    await (await exec_.launch(stream))
    assert calls == [1, 1]
    after = exec_.statistics()
    assert after.in_flight == 0
    assert after.signal_pool.in_use == before.in_use == 0
    destroy(exec_, graph, stream)


@pytest.mark.asyncio
async def test_a_destructor_launching_work_when_the_last_launch_completes(
    device: ahg.Device,
) -> None:
    """A user-object destructor run by the completion of the executable's last launch makes,
    launches and destroys another executable: it runs, and everything returns to baseline."""
    stream = device.create_stream()
    launched: list[ahg.Completion] = []

    def destructor(data: object) -> None:
        with ahg.Graph() as inner:
            inner.add_kernel_node(nothing, 1, 1)
            with inner.instantiate() as inner_exec:
                launched.append(inner_exec.launch_nowait(stream))

    graph = ahg.Graph()
    graph.add_kernel_node(nothing, 1, 1)
    graph.retain_user_object(ahg.UserObject(destructor), move=True)
    exec_ = graph.instantiate()
    graph.destroy()
    completion = await exec_.launch(stream)
    exec_.destroy()  # the launch in flight keeps it; its completion runs the destructor
    await completion
    await stream.synchronize()
    assert len(launched) == 1
    await launched[0]
    assert launched[0].exception() is None
    destroy(stream)


def test_a_user_object_whose_destructor_retains_or_releases_it_again(device: ahg.Device) -> None:
    """A destructor that touches its own dead object: HIP treats an unknown user object as a
    silent success, so both calls do nothing and the destructor runs once."""
    ran: list[str] = []
    box: list[ahg.UserObject] = []

    def destructor(data: object) -> None:
        ran.append("ran")
        box[0].retain()
        box[0].release()

    box.append(ahg.UserObject(destructor))
    assert box[0].release() is True
    assert ran == ["ran"]
    assert box[0].statistics().refcount == 0
    assert not box[0].alive


def test_a_user_object_destructor_raising_system_exit_on_a_direct_release(
    device: ahg.Device,
) -> None:
    """A direct release runs the destructor on the caller's thread; what it raises reaches the
    caller, and the object is dead either way."""

    def destructor(data: object) -> None:
        raise SystemExit(3)

    user_object = ahg.UserObject(destructor)
    with pytest.raises(SystemExit):
        user_object.release()
    assert not user_object.alive
    assert user_object.statistics().refcount == 0


@pytest.mark.asyncio
async def test_a_host_function_beginning_a_capture_on_a_second_stream(
    device: ahg.Device,
) -> None:
    """Host functions run outside any task, on the loop's thread: a GLOBAL capture begun there
    belongs to that thread, so a task cannot end it (``StreamCaptureWrongThread``), while a
    RELAXED one can be ended anywhere."""
    stream, target = device.create_stream(), device.create_stream()
    await (await stream.launch_host_func(target.begin_capture, ahg.CaptureMode.RELAXED))
    assert target.is_capturing() is ahg.CaptureStatus.ACTIVE
    graph = target.end_capture()
    assert graph.statistics().nodes == 0
    await (await stream.launch_host_func(target.begin_capture))  # GLOBAL
    with pytest.raises(ahg.StreamCaptureWrongThread):
        target.end_capture()
    assert target.is_capturing() is ahg.CaptureStatus.ACTIVE
    ended: list[ahg.Graph] = []
    await (await stream.launch_host_func(lambda: ended.append(target.end_capture())))
    assert target.is_capturing() is ahg.CaptureStatus.NONE
    destroy(graph, *ended, stream, target)


@pytest.mark.asyncio
async def test_cancelling_a_task_parked_in_a_capture_block_ends_the_capture(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    entered = asyncio.Event()

    async def body() -> None:
        async with stream.capture():
            await stream.launch_kernel(nothing, 1, 1)
            entered.set()
            await asyncio.Event().wait()  # parked until cancelled

    task = asyncio.create_task(body())
    await entered.wait()
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert "capture" not in repr(stream)
    await (await stream.launch_kernel(nothing, 1, 1))  # the stream runs work again
    destroy(stream)


def test_a_coroutine_function_as_a_destructor_is_refused_when_the_object_is_made() -> None:
    """An ``async def`` destructor was accepted; at the last release calling it made a
    coroutine nobody awaited, so the destructor silently never ran and a "never awaited"
    RuntimeWarning surfaced at some later collection."""
    ran: list[object] = []

    async def destructor(data: object) -> None:
        ran.append(data)

    class AsyncCallable:
        async def __call__(self, data: object) -> None:
            ran.append(data)

    with pytest.raises(TypeError, match="coroutine function"):
        ahg.UserObject(destructor)
    with pytest.raises(TypeError, match="coroutine function"):
        ahg.UserObject(AsyncCallable())
    assert ran == []
    ahg.UserObject(id).release()  # a builtin is a plain function
