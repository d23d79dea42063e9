"""A kernel given a peer's pointer without peer access fails with `InvalidDevicePointer`.

The failure is still a `LaunchFailure` (every kernel fault is, and its cause says why), but it is
also an `InvalidDevicePointer`, the error HIP's peer-access rule names, so either `except` works:
eagerly, in a graph launch, and at the stream's next synchronize.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def add_one(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    i = t.ids[t.ids < n]
    x[i] = x[i] + 1


@ahg.kernel
def raises(t: ahg.Threads) -> None:
    raise ValueError("not a pointer fault")


@pytest.mark.asyncio
async def test_an_eager_kernel_on_a_peer_pointer_without_access() -> None:
    d0, d1 = ahg.configure_devices(2)
    remote = d1.malloc(4 * 32)
    stream = d0.create_stream()
    completion = await stream.launch_kernel(add_one, 1, 32, (32, remote))
    with pytest.raises(ahg.InvalidDevicePointer) as info:
        await completion
    assert isinstance(info.value, ahg.LaunchFailure)
    assert info.value.code is ahg.ErrorCode.LaunchFailure
    assert isinstance(info.value.__cause__, ahg.InvalidDevicePointer)
    assert "add_one" in str(info.value)
    with pytest.raises(ahg.InvalidDevicePointer):
        await stream.synchronize()
    await stream.synchronize()  # reported once, then cleared
    assert not d1.view(remote, np.int32, 32).any()
    d0.enable_peer_access(d1)
    await stream.launch_kernel(add_one, 1, 32, (32, remote))
    await stream.synchronize()
    assert (d1.view(remote, np.int32, 32) == 1).all()
    d0.disable_peer_access(d1)
    destroy(stream, remote)


@pytest.mark.asyncio
async def test_a_graph_kernel_on_a_peer_pointer_without_access() -> None:
    d0, d1 = ahg.configure_devices(2)
    remote = d1.malloc(4 * 32)
    stream = d0.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 32, (32, remote))
    exec_ = graph.instantiate()
    with pytest.raises(ahg.InvalidDevicePointer) as info:
        await (await exec_.launch(stream))
    assert isinstance(info.value, ahg.LaunchFailure)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    assert exec_.statistics().signal_pool.in_use == 0  # the set came back despite the fault
    destroy(exec_, graph, stream, remote)


@pytest.mark.asyncio
async def test_other_kernel_faults_are_not_pointer_errors(device: ahg.Device) -> None:
    stream = device.create_stream()
    with pytest.raises(ahg.LaunchFailure) as info:
        await (await stream.launch_kernel(raises, 1, 1))
    assert not isinstance(info.value, ahg.InvalidDevicePointer)
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    destroy(stream)
