"""The relaunch rule of graphs with memory nodes, decided as each launch commits.

A graph whose allocation is still live cannot be launched again (``InvalidValue``, HIP's
``hipGraphLaunch``). The rule is checked before a launch parks for a signal set, and again
under the executable's lock as it commits: two launches that parked together both saw no
earlier launch, and only the first may be taken, or the second would allocate memory that is
already allocated while it runs.
"""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from ahipgraph.testing import exhaust_signal_sets, loop_turns

M = ahg.GraphMemAttribute
KIB = 1024


@pytest.mark.asyncio
async def test_of_two_launches_parked_for_a_signal_set_only_the_first_is_taken(
    device: ahg.Device,
) -> None:
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr  # never freed by the graph
        with graph.instantiate() as graph_exec:
            with exhaust_signal_sets(graph_exec):
                first = asyncio.ensure_future(graph_exec.launch(stream))
                second = asyncio.ensure_future(graph_exec.launch(stream))
                await loop_turns()  # both passed the check and parked: no launch yet
                assert not first.done()
                assert not second.done()
            await (await first)
            with pytest.raises(ahg.InvalidValue, match="never freed"):
                await second  # refused at the enqueue, not failing on the device
            assert graph_exec.statistics().launches == 1
            assert device.graph_mem_attribute(M.UsedMemCurrent) == KIB
            await stream.synchronize()  # the stream holds no failure
            device.free(ptr)
            await (await graph_exec.launch(stream))  # freed: launchable again
            device.free(ptr)
    assert device.graph_mem_trim() == KIB
