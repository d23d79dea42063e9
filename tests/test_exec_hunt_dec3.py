"""Executable graphs, as a user of HIP graphs combines them: each test is a case where the
library differed from what HIP_SEMANTICS.md, API.md or its own documentation promise.

Every handle a test makes is given back, and device memory is back where it started.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def tick(t: ahg.Threads) -> None:
    pass


# -- instantiate: UPLOAD's stream is any stream an upload takes --------------------------------


@pytest.mark.asyncio
async def test_instantiate_uploads_on_the_per_thread_stream(device: ahg.Device) -> None:
    """``hipGraphInstantiateWithParams``'s upload stream may be ``hipStreamPerThread`` (its
    upload resolves it, HIP_SEMANTICS §4.6), as ``exec.upload(STREAM_PER_THREAD)`` takes it:
    the option refused it as a wrong type."""
    graph = ahg.Graph()
    graph.add_kernel_node(tick, 1, 1)
    graph_exec = graph.instantiate(ahg.InstantiateFlags.UPLOAD, upload_stream=ahg.STREAM_PER_THREAD)
    assert graph_exec.flags is ahg.InstantiateFlags.UPLOAD
    await graph_exec.upload(ahg.STREAM_PER_THREAD)  # the call the flag stands for
    await (await graph_exec.launch(ahg.STREAM_PER_THREAD))
    assert graph_exec.statistics().completed == 1
    destroy(graph_exec, graph)
