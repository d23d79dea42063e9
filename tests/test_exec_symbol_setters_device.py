"""The executable's symbol-copy setters: the caller's endpoint moving device.

HIP's ``hipGraphExecMemcpyNodeSetParamsFromSymbol`` / ``...ToSymbol`` refuse a new ``dst``
(from a symbol) or ``src`` (to a symbol) whose memory is on another device than the node's
original pointer: InvalidValue. The setters compared only the symbol's side (which moves only
when the executable runs on another device), so a copy into device 1's memory was accepted on
a node made to copy into device 0's.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg

TABLE = ahg.device_symbol("exec_symbol_setters.table", 64)


@pytest.mark.asyncio
async def test_from_symbol_setter_refuses_a_destination_on_another_device() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    out0, other0, out1 = d0.malloc(64), d0.malloc(64), d1.malloc(64)
    d0.view(other0, np.uint8)[:] = 9
    graph = ahg.Graph()
    node = graph.add_memcpy_node_from_symbol(out0, TABLE, 64)
    graph_exec = graph.instantiate(device=d0)
    with pytest.raises(ahg.InvalidValue, match="cannot move to device 1"):
        graph_exec.set_memcpy_node_from_symbol(node, out1, TABLE, 64)
    # The failed call changed nothing: a launch still copies into out0.
    stream = d0.create_stream()
    d0.view(out0, np.uint8)[:] = 7
    await (await graph_exec.launch(stream))
    assert (d0.view(out0, np.uint8) == 0).all()
    # Another pointer on the same device is accepted.
    graph_exec.set_memcpy_node_from_symbol(node, other0, TABLE, 64)
    await (await graph_exec.launch(stream))
    assert (d0.view(other0, np.uint8) == 0).all()
    for handle in (graph_exec, graph, stream):
        handle.destroy()
    for ptr, device in ((out0, d0), (other0, d0), (out1, d1)):
        device.free(ptr)


@pytest.mark.asyncio
async def test_to_symbol_setter_refuses_a_source_on_another_device() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    src0, src1 = d0.malloc(64), d1.malloc(64)
    d0.view(src0, np.uint8)[:] = 4
    back = np.zeros(64, np.uint8)
    graph = ahg.Graph()
    to = graph.add_memcpy_node_to_symbol(TABLE, src0, 64)
    graph.add_memcpy_node_from_symbol(back, TABLE, 64, deps=[to])
    graph_exec = graph.instantiate(device=d0)
    with pytest.raises(ahg.InvalidValue, match="cannot move to device 1"):
        graph_exec.set_memcpy_node_to_symbol(to, TABLE, src1, 64)
    stream = d0.create_stream()
    await (await graph_exec.launch(stream))
    assert (back == 4).all()  # still copied from src0
    for handle in (graph_exec, graph, stream):
        handle.destroy()
    d0.free(src0)
    d1.free(src1)
