"""``launch_kernel`` on a capturing stream goes straight to the capture's ``add_kernel``.

The awaited method and the general ``_nowait`` twin (which runs the whole body) must add the
same nodes with the same parameters; every other state (destroyed, invalidated, eager) still
takes the general path with its errors, in HIP's order.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, N, affine, host_view, no_capture_left


def _shape(graph: ahg.Graph) -> list[tuple[object, ...]]:
    out = []
    for node in graph.nodes():
        params = node.params
        out.append(
            (
                node.type,
                params.kernel,
                params.grid,
                params.block,
                params.args,
                params.shared_mem,
                params.priority,
                params.arg_bytes,
                [graph.nodes().index(d) for d in node.dependencies()],
            )
        )
    return out


@pytest.mark.asyncio
async def test_awaited_and_nowait_capture_the_same_graph(device: ahg.Device) -> None:
    buf = device.malloc(NBYTES)
    graphs = []
    for awaited in (True, False):
        stream = device.create_stream(priority=-1)  # the stream's priority is carried
        stream.begin_capture()
        for i in range(5):
            if awaited:
                work = await stream.launch_kernel(affine, N, 1, (N, 1, i, buf, buf), shared_mem=0)
            else:
                work = stream.launch_kernel_nowait(affine, N, 1, (N, 1, i, buf, buf), shared_mem=0)
            assert work.node is not None
        await stream.launch_kernel(affine, (N, 1, 1), ahg.Dim3(1), args=(N, 2, 0, buf, buf))
        graphs.append(stream.end_capture())
        stream.destroy()
    assert _shape(graphs[0]) == _shape(graphs[1])
    assert graphs[0].nodes()[0].params.priority == -1
    stream = device.create_stream()
    results = []
    for graph in graphs:
        await device.memset(buf, 0, NBYTES)
        exec_ = graph.instantiate()
        await exec_.launch(stream)
        await stream.synchronize()
        results.append(host_view(device, buf).copy())
        exec_.destroy()
        graph.destroy()
    np.testing.assert_array_equal(results[0], results[1])
    stream.destroy()
    device.free(buf)
    no_capture_left()


@pytest.mark.asyncio
async def test_capturing_kernel_errors_keep_their_order(device: ahg.Device) -> None:
    buf = device.malloc(NBYTES)
    stream = device.create_stream()
    stream.begin_capture()
    with pytest.raises(ahg.InvalidConfiguration):  # validation, nothing added
        await stream.launch_kernel(affine, 1, 1 << 20, (N, 1, 0, buf, buf))
    with pytest.raises(TypeError):
        await stream.launch_kernel(affine, 1, 1, (N, 1, 0, buf))
    with pytest.raises(TypeError, match=r"Stream\.launch_kernel\(\)"):
        await stream.launch_kernel(affine, 1)  # type: ignore[call-arg]
    assert stream.capture_info().dependencies == ()
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await stream.synchronize()  # invalidates the capture
    with pytest.raises(ahg.StreamCaptureInvalidated):
        await stream.launch_kernel(affine, 1, 1, (N, 1, 0, buf, buf))
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    stream.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        await stream.launch_kernel(affine, 1, 1, (N, 1, 0, buf, buf))
    device.free(buf)
    no_capture_left()
