"""Kernels the conditional-node tests share."""

from __future__ import annotations

import ahipgraph as ahg


@ahg.kernel
def count_to(t: ahg.Threads, limit: ahg.int32, x: ahg.Ptr[ahg.int32], h: ahg.CondHandle) -> None:
    """x[0] += 1; keep looping while x[0] < limit."""
    x[0] += 1
    ahg.set_conditional(h, 1 if x[0] < limit else 0)


@ahg.kernel
def set_handle(t: ahg.Threads, value: ahg.uint32, h: ahg.CondHandle) -> None:
    ahg.set_conditional(h, value)


@ahg.kernel
def store(t: ahg.Threads, value: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] = value


def guarded(x: ahg.DevicePtr) -> tuple[ahg.Graph, ahg.ConditionalHandle, ahg.GraphNode]:
    """An IF node (default 0: off) whose body writes 42 to x[0]; the graph, handle and node."""
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=0)
    node, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    body.add_kernel_node(store, 1, 1, (42, x))
    return graph, handle, node


async def runs_the_body(device: ahg.Device, graph_exec: ahg.GraphExec, x: ahg.DevicePtr) -> bool:
    """Launch ``graph_exec`` with x[0] cleared; whether the guarded body wrote its 42."""
    device.view(x, "int32", 1)[:] = 0
    with device.create_stream() as stream:
        await (await graph_exec.launch(stream))
    return bool(device.view(x, "int32", 1)[0] == 42)
