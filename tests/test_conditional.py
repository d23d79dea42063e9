"""Conditional nodes (IF, WHILE, SWITCH): HIP's checks, device-side handles, bodies run with
no host involvement, results equal eager/numpy, clone/child/capture/update, and the ways a body
that never ends is still ended (destroy, cancellation) without leaking."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.graph_exec import EXECS
from ahipgraph.testing.leaks import leak_report
from ahipgraph.testing.leaks import snapshot as leak_snapshot
from cleanup import destroy
from conditional_kernels import count_to

K = ahg.ConditionalKind


@ahg.kernel
def setter(t: ahg.Threads, value: ahg.uint32, h: ahg.CondHandle) -> None:
    ahg.set_conditional(h, value)


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int32, index: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[index] = value


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


def read(device: ahg.Device, ptr: ahg.DevicePtr, n: int = 1) -> list[int]:
    return [int(v) for v in device.view(ptr, np.int32, n)]


# -- building: HIP's checks -----------------------------------------------------------------------


def test_kinds_and_node_type_are_hips() -> None:
    assert [(k.name, k.value) for k in K] == [("If", 0), ("While", 1), ("Switch", 2)]
    assert ahg.NodeType.Conditional == 15


def test_add_returns_empty_bodies_owned_by_the_node() -> None:
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=3)
    assert (handle.default, handle.assign_default) == (3, True)
    node, bodies = graph.add_conditional_node(handle, K.If, 2)
    assert node.type is ahg.NodeType.Conditional
    assert len(bodies) == 2
    assert bodies[0] is not bodies[1]
    assert node.params.bodies == tuple(bodies)
    assert node.params.size == 2
    assert all(body.statistics().nodes == 0 for body in bodies)
    with pytest.raises(ahg.InvalidValue, match="belongs to"):
        bodies[0].destroy()  # destroy the node, not its body
    with pytest.raises(ahg.InvalidValue, match="fixed"):
        node.set_params(node.params)
    with pytest.raises(ahg.NotSupported, match="a conditional node's body cannot"):
        bodies[0].add_mem_alloc_node(64)  # bodies are embedded graphs (named as what they are)
    node.destroy()
    assert all(body.destroyed for body in bodies)
    graph.destroy()


BAD_ADDS: list[tuple[str, Any, Any, Any, type[Exception]]] = [
    ("null handle", None, K.If, 1, ahg.InvalidValue),
    ("handle of another graph", "foreign", K.If, 1, ahg.InvalidValue),
    ("not a handle", 5, K.If, 1, TypeError),
    ("unknown kind", "own", 3, 1, ahg.InvalidValue),
    ("negative kind", "own", -1, 1, ahg.InvalidValue),
    ("kind as a string", "own", "If", 1, ahg.InvalidValue),
    ("WHILE with 2 bodies", "own", K.While, 2, ahg.InvalidValue),
    ("WHILE with 0 bodies", "own", K.While, 0, ahg.InvalidValue),
    ("IF with 3 bodies", "own", K.If, 3, ahg.InvalidValue),
    ("IF with 0 bodies", "own", K.If, 0, ahg.InvalidValue),
    ("SWITCH with 0 bodies", "own", K.Switch, 0, ahg.InvalidValue),
    ("SWITCH with too many", "own", K.Switch, 2**16 + 1, ahg.InvalidValue),
    ("size not an int", "own", K.If, 1.0, TypeError),
    ("size a bool", "own", K.If, True, TypeError),
]


@pytest.mark.parametrize(
    ("handle", "kind", "size", "error"),
    [case[1:] for case in BAD_ADDS],
    ids=[case[0] for case in BAD_ADDS],
)
def test_bad_add_is_refused_and_changes_nothing(
    handle: Any, kind: Any, size: Any, error: type[Exception]
) -> None:
    graph, other = ahg.Graph(), ahg.Graph()
    own = graph.conditional_handle()
    given = {"own": own, "foreign": other.conditional_handle()}.get(handle, handle)
    before = graph.statistics()
    with pytest.raises(error):
        graph.add_conditional_node(given, kind, size)
    assert graph.statistics() == before
    graph.destroy()
    other.destroy()


@pytest.mark.parametrize(
    ("default", "assign", "error"),
    [
        (-1, True, ahg.InvalidValue),
        (2**32, True, ahg.InvalidValue),
        (1.0, True, TypeError),
        (True, True, TypeError),
        (0, 2, ahg.InvalidValue),  # HIP's flags: 0 or hipGraphCondAssignDefault (1)
        (0, "yes", TypeError),
    ],
)
def test_bad_handle_is_refused(default: Any, assign: Any, error: type[Exception]) -> None:
    graph = ahg.Graph()
    with pytest.raises(error):
        graph.conditional_handle(default, assign_default=assign)
    graph.destroy()
    with pytest.raises(ahg.InvalidValue):
        graph.conditional_handle()


def test_assign_default_takes_hips_flag_values_as_every_switch_flag() -> None:
    graph = ahg.Graph()
    assert graph.conditional_handle(0, assign_default=1).assign_default is True
    assert graph.conditional_handle(0, assign_default=0).assign_default is False
    assert graph.conditional_handle(0, assign_default=np.bool_(True)).assign_default is True
    graph.destroy()


def test_kernel_handle_parameter_takes_only_handles() -> None:
    graph = ahg.Graph()
    with pytest.raises(TypeError, match="CondHandle"):
        graph.add_kernel_node(setter, 1, 1, (1, 5))
    graph.destroy()


# -- running --------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_while_counts_on_the_device_in_one_launch(device: ahg.Device) -> None:
    x = device.malloc(4)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, K.While)
    body.add_kernel_node(count_to, 1, 1, (10, x, handle))
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert read(device, x) == [10]
    await (await graph_exec.launch(stream))  # default re-applied: one more iteration
    assert read(device, x) == [11]
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_while_with_default_zero_runs_no_iteration(device: ahg.Device) -> None:
    x = device.malloc(4)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=0)
    _, (body,) = graph.add_conditional_node(handle, K.While)
    body.add_kernel_node(bump, 1, 1, (x,))
    graph_exec = graph.instantiate()
    await (await graph_exec.launch())
    assert read(device, x) == [0]
    graph_exec.destroy()
    graph.destroy()
    device.free(x)


@pytest.mark.asyncio
@pytest.mark.parametrize(("value", "expected"), [(0, [0, 2]), (1, [1, 0]), (7, [1, 0])])
async def test_if_else_chooses_by_a_kernel_set_value(
    device: ahg.Device, value: int, expected: list[int]
) -> None:
    x = device.malloc(8)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=0)
    decide = graph.add_kernel_node(setter, 1, 1, (value, handle))
    _, (then, otherwise) = graph.add_conditional_node(handle, K.If, 2, deps=[decide])
    then.add_kernel_node(put, 1, 1, (1, 0, x))
    otherwise.add_kernel_node(put, 1, 1, (2, 1, x))
    graph_exec = graph.instantiate()
    await (await graph_exec.launch())
    assert read(device, x, 2) == expected
    graph_exec.destroy()
    graph.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_if_without_else_and_switch(device: ahg.Device) -> None:
    x = device.malloc(16)
    graph = ahg.Graph()
    h_if = graph.conditional_handle(default=0)
    h_sw = graph.conditional_handle(default=2)
    _, (then,) = graph.add_conditional_node(h_if, K.If)
    then.add_kernel_node(put, 1, 1, (9, 3, x))
    _, cases = graph.add_conditional_node(h_sw, K.Switch, 3)
    for i, case in enumerate(cases):
        case.add_kernel_node(put, 1, 1, (10 + i, i, x))
    graph_exec = graph.instantiate()
    await (await graph_exec.launch())
    assert read(device, x, 4) == [0, 0, 12, 0]  # IF false: nothing; SWITCH 2: case 2
    graph_exec.destroy()
    graph.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_switch_out_of_range_runs_nothing(device: ahg.Device) -> None:
    x = device.malloc(8)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=5)
    _, cases = graph.add_conditional_node(handle, K.Switch, 2)
    for i, case in enumerate(cases):
        case.add_kernel_node(put, 1, 1, (1, i, x))
    graph_exec = graph.instantiate()
    await (await graph_exec.launch())
    assert read(device, x, 2) == [0, 0]
    graph_exec.destroy()
    graph.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_without_assign_default_the_value_persists_across_launches(
    device: ahg.Device,
) -> None:
    x = device.malloc(4)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1, assign_default=False)
    _, (body,) = graph.add_conditional_node(handle, K.If)
    body.add_kernel_node(bump, 1, 1, (x,))
    body.add_kernel_node(setter, 1, 1, (0, handle))  # turns itself off
    graph_exec = graph.instantiate()
    for _ in range(3):
        await (await graph_exec.launch())
    assert read(device, x) == [1]  # only the first launch saw 1
    graph_exec.destroy()
    graph.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_nested_bodies_with_child_graphs_memcpy_memset_and_async_kernels(
    device: ahg.Device,
) -> None:
    @ahg.kernel
    async def slow_bump(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
        await asyncio.sleep(0)
        x[0] += 1

    x = device.malloc(16)
    graph = ahg.Graph()
    outer = graph.conditional_handle(default=1)
    inner = graph.conditional_handle(default=1)
    _, (loop,) = graph.add_conditional_node(outer, K.While)
    step = loop.add_kernel_node(count_to, 1, 1, (3, x, outer))
    _, (then,) = loop.add_conditional_node(inner, K.If, deps=[step])
    then.add_kernel_node(slow_bump, 1, 1, (x + 4,))
    child = ahg.Graph()
    fill = child.add_memset_node(x + 8, 0, 4)
    child.add_memcpy_node(x + 12, x + 4, 4, deps=[fill])
    then.add_child_graph_node(child)
    graph_exec = graph.instantiate()
    await (await graph_exec.launch())
    assert read(device, x, 4) == [3, 3, 0, 3]
    graph_exec.destroy()
    graph.destroy()
    child.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_results_equal_eager_and_numpy(device: ahg.Device) -> None:
    """A WHILE loop halving until below 1, against the same steps eagerly and in numpy."""

    @ahg.kernel
    def halve(t: ahg.Threads, x: ahg.Ptr[ahg.float64], h: ahg.CondHandle) -> None:
        x[:] = x / 2
        ahg.set_conditional(h, 1 if x.max() >= 1 else 0)

    @ahg.kernel
    def halve_eager(t: ahg.Threads, x: ahg.Ptr[ahg.float64]) -> None:
        x[:] = x / 2

    start = np.array([100.0, 7.0, 3.0, 1000.0])
    expected = start.copy()
    while True:
        expected /= 2
        if expected.max() < 1:
            break
    x, y = device.malloc(32), device.malloc(32)
    stream = device.create_stream()
    await stream.memcpy(x, start)
    await stream.memcpy(y, start)
    await stream.synchronize()
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, K.While)
    body.add_kernel_node(halve, 1, 1, (x, handle))
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    while True:  # the same loop on the host: launch, wait, test
        await stream.launch_kernel(halve_eager, 1, 1, (y,))
        await stream.synchronize()
        if device.view(y, np.float64, 4).max() < 1:
            break
    assert device.view(x, np.float64, 4).tolist() == expected.tolist()
    assert device.view(y, np.float64, 4).tolist() == expected.tolist()
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)
    device.free(y)


@pytest.mark.asyncio
async def test_a_handle_outside_an_executable_fails_cleanly(device: ahg.Device) -> None:
    graph = ahg.Graph()
    handle = graph.conditional_handle()
    stream = device.create_stream()
    await stream.launch_kernel(setter, 1, 1, (1, handle))
    with pytest.raises(ahg.LaunchFailure, match=r"InvalidDevicePointer|not inside"):
        await stream.synchronize()
    graph.destroy()
    stream.destroy()


# -- clone, child graphs, executables, update, capture ------------------------------------------


@pytest.mark.asyncio
async def test_clone_and_child_graph_copies_run_independently(device: ahg.Device) -> None:
    x = device.malloc(4)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    node, (body,) = graph.add_conditional_node(handle, K.While)
    body.add_kernel_node(count_to, 1, 1, (5, x, handle))
    clone = graph.clone()
    twin = clone.find_in_clone(node)
    assert twin.params.bodies[0] is not body
    assert twin.params.bodies[0].original is body
    clone.add_conditional_node(handle, K.If)  # a clone may use its original's handles
    parent = ahg.Graph()
    parent.add_child_graph_node(graph)
    for g in (clone, parent):
        graph_exec = g.instantiate()
        device.view(x, np.int32, 1)[0] = 0
        await (await graph_exec.launch())
        assert read(device, x) == [5]
        graph_exec.destroy()
    body.add_kernel_node(bump, 1, 1, (x,))  # the copies do not see later edits
    assert twin.params.bodies[0].statistics().nodes == 1
    for g in (graph, clone, parent):
        g.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_two_executables_of_one_graph_have_their_own_handle_cells(
    device: ahg.Device,
) -> None:
    x = device.malloc(4)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=0, assign_default=False)
    cond, (body,) = graph.add_conditional_node(handle, K.If)
    body.add_kernel_node(bump, 1, 1, (x,))
    plain = graph.instantiate()  # never sets the handle
    decide = graph.add_kernel_node(setter, 1, 1, (1, handle))
    graph.add_dependencies(decide, cond)
    setting = graph.instantiate()  # sets it before the IF node runs
    stream = device.create_stream()
    await (await setting.launch(stream))
    assert read(device, x) == [1]
    await (await plain.launch(stream))  # its own cell still holds the default, 0
    assert read(device, x) == [1]
    await (await setting.launch(stream))
    assert read(device, x) == [2]
    for e in (plain, setting):
        e.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_exec_setter_rebinds_handle_arguments(device: ahg.Device) -> None:
    x = device.malloc(4)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=0)
    decide = graph.add_kernel_node(setter, 1, 1, (0, handle))
    _, (body,) = graph.add_conditional_node(handle, K.If, deps=[decide])
    body.add_kernel_node(bump, 1, 1, (x,))
    graph_exec = graph.instantiate()
    await (await graph_exec.launch())
    assert read(device, x) == [0]
    graph_exec.set_kernel_node_params(decide, setter, 1, 1, (1, handle))
    await (await graph_exec.launch())
    assert read(device, x) == [1]
    new = graph.clone()
    new.find_in_clone(decide).set_kernel_params(setter, 1, 1, (0, handle))
    assert graph_exec.update(new).ok
    await (await graph_exec.launch())
    assert read(device, x) == [1]
    graph_exec.destroy()
    graph.destroy()
    new.destroy()
    device.free(x)


def test_a_body_with_a_host_node_is_not_supported_at_instantiate(device: ahg.Device) -> None:
    graph = ahg.Graph()
    handle = graph.conditional_handle()
    _, (body,) = graph.add_conditional_node(handle, K.If)
    body.add_host_node(print)
    before = device.memory.statistics()
    with pytest.raises(ahg.NotSupported, match="Host"):
        graph.instantiate()
    assert device.memory.statistics() == before
    assert not graph.instantiated
    graph.destroy()


@pytest.mark.asyncio
async def test_bodies_filled_by_capture_to_graph(device: ahg.Device) -> None:
    x = device.malloc(4)
    stream = device.create_stream()
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, K.While)
    stream.begin_capture_to_graph(body)
    await stream.launch_kernel(count_to, 1, 1, (4, x, handle))
    assert stream.end_capture() is body
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    assert read(device, x) == [4]
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_conditional_node_added_to_a_capture(device: ahg.Device) -> None:
    x = device.malloc(4)
    stream = device.create_stream()
    stream.begin_capture()
    await stream.memset(x, 0, 4)
    info = stream.capture_info()
    assert info.graph is not None
    handle = info.graph.conditional_handle(default=1)
    node, (body,) = info.graph.add_conditional_node(handle, K.While, deps=info.dependencies)
    body.add_kernel_node(count_to, 1, 1, (6, x, handle))
    stream.update_capture_dependencies([node], ahg.CaptureDependencies.SET)
    await stream.launch_kernel(bump, 1, 1, (x,))
    graph = stream.end_capture()
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    assert read(device, x) == [7]
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)


# -- bodies that never end ------------------------------------------------------------------


def never_ending(device: ahg.Device, x: ahg.DevicePtr) -> ahg.Graph:
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, K.While)
    body.add_kernel_node(bump, 1, 1, (x,))  # never clears the handle
    return graph


@pytest.mark.asyncio
async def test_destroy_ends_a_body_that_never_ends_and_leaks_nothing(device: ahg.Device) -> None:
    x = device.malloc(4)
    baseline = leak_snapshot()
    graph = never_ending(device, x)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    done = await graph_exec.launch(stream)
    for _ in range(20):  # the loop iterates once per event-loop turn: the host keeps running
        await asyncio.sleep(0)
    assert not done.done()
    # The host reads the counter while the body writes it, on purpose: under a race check
    # (the environment switch) that race is collected here, not reported.
    with ahg.race_check(on_race="collect"):
        assert read(device, x)[0] > 5
    graph_exec.destroy()
    with pytest.raises(ahg.IllegalState, match="destroyed while its WHILE node looped"):
        await done
    with pytest.raises(ahg.IllegalState):
        await stream.synchronize()  # the error is reported to the launch stream too
    iterations = read(device, x)[0]
    await asyncio.sleep(0)
    assert read(device, x)[0] == iterations  # stopped for good
    graph.destroy()
    stream.destroy()
    assert EXECS.get(graph_exec.hid) is None
    assert leak_report(baseline) is None
    destroy(x)


@pytest.mark.asyncio
async def test_cancelling_the_waiter_then_destroying_ends_it(device: ahg.Device) -> None:
    x = device.malloc(4)
    baseline = leak_snapshot()
    graph = never_ending(device, x)
    graph_exec = graph.instantiate()
    stream = device.create_stream()

    async def wait() -> None:
        await (await graph_exec.launch(stream))

    task = asyncio.ensure_future(wait())
    for _ in range(10):
        await asyncio.sleep(0)
    task.cancel()  # the waiter goes at once; the device work is the executable's to end
    with pytest.raises(asyncio.CancelledError):
        await task
    graph_exec.destroy()
    with pytest.raises(ahg.IllegalState):  # returns: the loop was ended, the launch failed
        await device.synchronize()
    graph.destroy()
    stream.destroy()
    assert leak_report(baseline) is None
    destroy(x)


@pytest.mark.asyncio
async def test_a_waiting_synchronize_can_be_cancelled(device: ahg.Device) -> None:
    x = device.malloc(4)
    graph = never_ending(device, x)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await graph_exec.launch(stream)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(stream.synchronize(), timeout=0.05)
    graph_exec.destroy()
    with pytest.raises(ahg.IllegalState):
        await stream.synchronize()
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_update_keeps_equal_bodies_and_refuses_changed_ones(device: ahg.Device) -> None:
    x = device.malloc(4)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    node, (body,) = graph.add_conditional_node(handle, K.While)
    body.add_kernel_node(count_to, 1, 1, (3, x, handle))
    graph_exec = graph.instantiate()
    same = graph.clone()
    assert graph_exec.update(same).ok  # same bodies: nothing to change
    changed = graph.clone()
    (step,) = changed.find_in_clone(node).params.bodies[0].nodes()
    step.set_kernel_params(count_to, 1, 1, (9, x, handle))
    with pytest.raises(ahg.GraphExecUpdateFailure) as failure:
        graph_exec.update(changed)
    result = failure.value.result  # type: ignore[attr-defined]
    assert result.kind is ahg.UpdateResultKind.ParametersChanged
    assert result.node is changed.find_in_clone(node)
    other_kind = ahg.Graph()
    h2 = other_kind.conditional_handle(default=1)
    _, (b2,) = other_kind.add_conditional_node(h2, K.If)
    b2.add_kernel_node(count_to, 1, 1, (3, x, h2))
    with pytest.raises(ahg.GraphExecUpdateFailure):
        graph_exec.update(other_kind)
    await (await graph_exec.launch())  # the executable is as it was
    assert read(device, x) == [3]
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_node_params(node, ahg.GraphNodeParams(ahg.NodeType.Conditional, node.params))
    graph_exec.destroy()
    for g in (graph, same, changed, other_kind):
        g.destroy()
    device.free(x)


def test_dot_draws_the_node_and_its_bodies() -> None:
    graph = ahg.Graph()
    handle = graph.conditional_handle()
    node, bodies = graph.add_conditional_node(handle, K.Switch, 2)
    bodies[1].add_empty_node()
    text = graph.to_dot()
    assert f'label="{node.id}\\nSWITCH\\n(graph_{bodies[0].id},graph_{bodies[1].id})"' in text
    assert 'shape="diamond"' in text
    assert text.count("subgraph cluster_") == 3
    graph.destroy()


def test_an_endless_body_abandoned_by_a_closed_loop_fails_on_the_next_loop() -> None:
    device = ahg.get_device(0)
    x = device.malloc(4)
    graph = never_ending(device, x)
    graph_exec = graph.instantiate()

    async def start() -> ahg.Completion:
        done = await graph_exec.launch()
        for _ in range(5):  # a few iterations, then this loop closes with the body looping
            await asyncio.sleep(0)
        return done

    done = asyncio.run(start())
    assert not done.done()

    async def finish() -> None:
        with pytest.raises(ahg.IllegalState, match="event loop"):
            await done
        with pytest.raises(ahg.IllegalState):  # reported to the launch stream as well
            await device.synchronize()
        await device.synchronize()  # nothing is left running
        assert device.statistics().in_flight == 0

    asyncio.run(finish())
    graph_exec.destroy()
    graph.destroy()
    device.free(x)
    assert device.memory.bytes_in_use == 0


def test_adds_from_os_threads_are_whole(fast_switching: None) -> None:
    from ahipgraph.testing.helpers import run_together

    graph = ahg.Graph()
    handle = graph.conditional_handle()

    def add_many() -> None:
        for _ in range(50):
            _, bodies = graph.add_conditional_node(handle, K.Switch, 3)
            for body in bodies:
                body.add_empty_node()

    assert run_together(add_many, add_many, add_many) == []
    nodes = graph.nodes()
    assert len(nodes) == 150
    assert all(len(n.params.bodies) == 3 for n in nodes)
    assert all(b.owner_node is n for n in nodes for b in n.params.bodies)
    clone = graph.clone()
    assert sum(len(b.nodes()) for n in clone.nodes() for b in n.params.bodies) == 450
    clone.destroy()
    graph.destroy()


@pytest.mark.parametrize("nbytes", [None, 8], ids=["first allocation", "a handle cell"])
def test_instantiate_failing_half_way_gives_everything_back(
    device: ahg.Device, nbytes: int | None
) -> None:
    from ahipgraph import testing

    graph = ahg.Graph()
    h1, h2 = graph.conditional_handle(default=1), graph.conditional_handle()
    _, (body,) = graph.add_conditional_node(h1, K.While)
    body.add_kernel_node(setter, 1, 1, (0, h1))
    graph.add_conditional_node(h2, K.If)
    before = leak_snapshot()
    with testing.fail_allocations(1, nbytes=nbytes), pytest.raises(ahg.OutOfMemory):
        graph.instantiate()
    assert leak_report(before) is None
    assert device.memory.statistics().bytes_in_use == before.devices[0].memory.bytes_in_use
    assert not graph.instantiated
    graph_exec = graph.instantiate()  # and it still can be
    graph_exec.destroy()
    graph.destroy()


def test_the_executable_owns_the_user_objects_of_its_bodies(device: ahg.Device) -> None:
    ran: list[str] = []
    obj = ahg.UserObject(lambda _data: ran.append("destroyed"))
    graph = ahg.Graph()
    handle = graph.conditional_handle()
    _, (body,) = graph.add_conditional_node(handle, K.If)
    body.retain_user_object(obj, move=True)
    graph_exec = graph.instantiate()
    graph.destroy()
    assert ran == []  # the executable still holds a reference
    graph_exec.destroy()
    assert ran == ["destroyed"]


@pytest.mark.asyncio
async def test_a_capture_into_a_body_refuses_stream_ordered_memory(device: ahg.Device) -> None:
    """``malloc_async`` (and its twin) captured into a body: NotSupported, naming the body,
    and nothing reserved."""
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, K.If)
    stream = device.create_stream()
    before = device.memory.statistics()
    stream.begin_capture_to_graph(body)
    with pytest.raises(ahg.NotSupported, match="a conditional node's body cannot hold memory"):
        stream.malloc_async_nowait(64)
    with pytest.raises(ahg.NotSupported, match="a conditional node's body cannot hold memory"):
        await stream.malloc_async(64)
    stream.end_capture()
    assert body.statistics().nodes == 0
    assert device.memory.statistics() == before
    destroy(graph, stream)
