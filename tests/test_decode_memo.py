"""A run of kernel ops decodes its pointer arguments through a memo of views by address.

The memo (``ArgLayout.memo_decoder``) must give exactly what ``ArgLayout.decode`` gives, raise
what it raises, remember nothing from a failed decode, and be forgotten whenever memory is
freed, so that a replay never writes through the view of a freed allocation.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.device.memory import DeviceMemory


@ahg.kernel
def store(t: ahg.Threads, x: ahg.Ptr[ahg.int32], n: ahg.int32) -> None:
    x[0] = n


@ahg.kernel
def two(t: ahg.Threads, a: ahg.Ptr[ahg.float32], n: ahg.int32, b: ahg.Ptr[ahg.int64]) -> None:
    """Two pointers of different element types around a scalar: the general path."""


def _memory(device: ahg.Device) -> DeviceMemory:
    memory = device.memory
    assert isinstance(memory, DeviceMemory)
    return memory


def _decoded_alike(old: list[object], new: tuple[object, ...]) -> bool:
    if len(old) != len(new):
        return False
    for a, b in zip(old, new, strict=True):
        if isinstance(a, np.ndarray):
            if not (isinstance(b, np.ndarray) and a.dtype == b.dtype and np.shares_memory(a, b)):
                return False
            if a.__array_interface__["data"] != b.__array_interface__["data"]:
                return False
        elif a != b or type(a) is not type(b):
            return False
    return True


@pytest.mark.parametrize("kernel", [store, two])
def test_the_memo_decodes_as_decode_does_null_pointers_included(
    device: ahg.Device, kernel: ahg.Kernel
) -> None:
    memory = _memory(device)
    a = device.malloc(64)
    b = device.malloc(64)
    layout = kernel.layout
    cases = [(a, 5), (a + 8, -1), (None, 3)] if kernel is store else [(a, 1, b), (None, 2, b)]
    buffer = bytearray(layout.size * len(cases))
    for i, args in enumerate(cases):
        buffer[i * layout.size : (i + 1) * layout.size] = kernel.pack(args)
    decode, reset = layout.memo_decoder()
    try:
        for _ in range(2):  # the second round reads the memo
            for i in range(len(cases)):
                offset = i * layout.size
                got = decode(buffer, offset, memory)
                assert type(got) is tuple
                assert _decoded_alike(layout.decode(buffer, offset, memory), got)
        reset()
        assert _decoded_alike(layout.decode(buffer, 0, memory), decode(buffer, 0, memory))
    finally:
        device.free(a)
        device.free(b)


def test_a_bad_pointer_raises_as_decode_does_and_is_not_remembered(device: ahg.Device) -> None:
    memory = _memory(device)
    a = device.malloc(64)
    layout = store.layout
    buffer = bytearray(store.pack((a, 1)))
    device.free(a)
    decode, _ = layout.memo_decoder()
    with pytest.raises(ahg.InvalidDevicePointer) as expected:
        layout.decode(buffer, 0, memory)
    with pytest.raises(ahg.InvalidDevicePointer) as got:
        decode(buffer, 0, memory)
    assert str(got.value) == str(expected.value)
    with pytest.raises(ahg.InvalidDevicePointer):  # again: nothing was remembered
        decode(buffer, 0, memory)


@pytest.mark.asyncio
async def test_a_replay_after_a_free_never_writes_through_the_freed_view(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    a = device.malloc(64)
    graph = ahg.Graph()
    first = graph.add_kernel_node(store, 1, 1, (a, 1))
    graph.add_kernel_node(store, 1, 1, (a + 4, 2), deps=first)
    exec_ = graph.instantiate()
    try:
        await (await exec_.launch(stream))
        assert [int(v) for v in device.view(a, np.int32, 2)] == [1, 2]
        device.free(a)
        b = device.malloc(64)  # the allocator may hand the same address out again
        try:
            if b.address == a.address:
                exec_.set_kernel_node_params(first, store, 1, 1, (b, 7))
                await (await exec_.launch(stream))
                # both nodes wrote into b's memory, not into the freed allocation's old view
                assert [int(v) for v in device.view(b, np.int32, 2)] == [7, 2]
            else:
                with pytest.raises(ahg.HipError):
                    await (await exec_.launch(stream))
        finally:
            device.free(b)
    finally:
        exec_.destroy()
        graph.destroy()
        stream.destroy()
