"""Stream memory operations: waits on a device word with HIP's flags and masks, writes, capture."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.runtime.stream_memops import StreamMemOp, condition_met
from ahipgraph.testing import snapshot
from cleanup import destroy

F = ahg.StreamWaitFlag


@ahg.kernel
def store(t: ahg.Threads, value: ahg.uint32, word: ahg.Ptr[ahg.uint32]) -> None:
    word[0] = value


# -- the conditions, as HIP documents them -------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "value", "flag", "mask", "bits", "met"),
    [
        (5, 5, F.GEQ, 0xFFFFFFFF, 32, True),
        (4, 5, F.GEQ, 0xFFFFFFFF, 32, False),
        (0x105, 0x5, F.GEQ, 0xFF, 32, True),  # masked to 5
        (0x104, 0x5, F.GEQ, 0xFF, 32, False),
        (7, 7, F.EQ, 0xFFFFFFFF, 32, True),
        (0xF7, 7, F.EQ, 0x0F, 32, True),
        (8, 7, F.EQ, 0xFFFFFFFF, 32, False),
        (0b1010, 0b0010, F.AND, 0xFFFFFFFF, 32, True),
        (0b1010, 0b0101, F.AND, 0xFFFFFFFF, 32, False),
        (0b1010, 0b0010, F.AND, 0b1000, 32, False),  # the mask hides the common bit
        (0, 0, F.NOR, 0xFFFFFFFF, 32, True),
        (0xFFFFFFFF, 0, F.NOR, 0xFFFFFFFF, 32, False),
        (0xFFFF0000, 0x0000FFFF, F.NOR, 0xFFFFFFFF, 32, False),
        (0xFFFF0000, 0x0000FFFF, F.NOR, 0x0000FF00, 32, True),  # mask on both sides
        (2**63, 2**63, F.GEQ, 2**64 - 1, 64, True),
        (2**64 - 1, 0, F.NOR, 2**64 - 1, 64, False),
    ],
)
def test_condition_met_follows_hip(
    word: int, value: int, flag: Any, mask: int, bits: int, met: bool
) -> None:
    assert condition_met(word, value, flag, mask, bits) is met


def test_bad_memops_are_refused_in_hip_order(device: ahg.Device) -> None:
    word = device.malloc(16)
    for null in (None, ahg.NULL):
        with pytest.raises(ahg.InvalidValue, match="null"):
            StreamMemOp.make(null, 1, 32, flag=9)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue, match="flag"):
        StreamMemOp.make(word, 1, 32, flag=4)
    with pytest.raises(ahg.InvalidValue, match="flag"):
        StreamMemOp.make(word, 1, 32, flag=-1)
    with pytest.raises(ahg.InvalidValue, match="write flags"):
        StreamMemOp.make(word, 1, 32, write_flags=1)
    with pytest.raises(ValueError, match="32-bit"):
        StreamMemOp.make(word, 2**32, 32, flag=F.EQ)
    with pytest.raises(ValueError, match="64-bit"):
        StreamMemOp.make(word, -1, 64, flag=F.EQ)
    with pytest.raises(ValueError, match="mask"):
        StreamMemOp.make(word, 1, 32, flag=F.EQ, mask=2**32)
    with pytest.raises(TypeError):
        StreamMemOp.make(word, 1.0, 32, flag=F.EQ)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        StreamMemOp.make(word, 1, 32, flag=True)
    with pytest.raises(ahg.InvalidValue, match="aligned"):
        StreamMemOp.make(word + 2, 1, 32, flag=F.EQ)
    with pytest.raises(ahg.InvalidValue, match="aligned"):
        StreamMemOp.make(word + 4, 1, 64, flag=F.EQ)
    short = device.malloc(12)
    with pytest.raises(ahg.InvalidValue, match="past the end"):
        StreamMemOp.make(short + 8, 1, 64, flag=F.EQ)
    with pytest.raises(ahg.InvalidDevicePointer):
        StreamMemOp.make(ahg.DevicePtr(0, 1 << 41), 1, 32, flag=F.EQ)
    destroy(word, short)


# -- eager -----------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_wait_holds_its_stream_until_a_write_on_another_stream(
    ahg_device: ahg.Device,
) -> None:
    device = ahg_device
    word = device.malloc(8)
    waiter, writer = device.create_stream(), device.create_stream()
    log: list[str] = []
    await waiter.wait_value_32(word, 3, F.GEQ)
    after = await waiter.launch_host_func(log.append, "after the wait")
    await asyncio.sleep(0)  # the waiter's queue runs: the word is 0
    await asyncio.sleep(0)
    assert log == []
    assert not after.done()
    await writer.write_value_32(word, 2)
    await writer.synchronize()
    await asyncio.sleep(0)  # a poll sees 2: still below 3
    assert log == []
    await writer.write_value_32(word, 3)
    await waiter.synchronize()
    assert log == ["after the wait"]
    assert device.view(word, np.uint32, 1)[0] == 3
    waiter.destroy()
    writer.destroy()
    device.free(word)


@pytest.mark.asyncio
async def test_a_kernel_or_the_host_can_release_a_wait(ahg_device: ahg.Device) -> None:
    device = ahg_device
    word = device.malloc(8)
    waiter, other = device.create_stream(), device.create_stream()
    done = await waiter.wait_value_32(word, 0x10, F.AND, mask=0xF0)
    await other.launch_kernel(store, 1, 1, (0x0F, word))  # masked away: still waiting
    await other.synchronize()
    await asyncio.sleep(0)
    assert not done.done()
    await other.launch_kernel(store, 1, 1, (0x1F, word))
    await done
    await other.synchronize()  # the store released the wait; the host writes the word next
    done = await waiter.wait_value_64(word, 7, F.EQ)
    device.view(word, np.uint64, 1)[0] = 7  # a host write through a view
    await done
    waiter.destroy()
    other.destroy()
    device.free(word)


@pytest.mark.asyncio
async def test_64_bit_writes_and_a_satisfied_wait_costs_one_memop(device: ahg.Device) -> None:
    word = device.malloc(8)
    stream = device.create_stream()
    await stream.write_value_64(word, 2**40 + 5)
    done = await stream.wait_value_64(word, 2**40, F.GEQ)
    await done
    assert device.view(word, np.uint64, 1)[0] == 2**40 + 5
    assert done.end_ns - done.start_ns == device.properties.cost.stream_memop_ns
    destroy(word, stream)


@pytest.mark.asyncio
async def test_freeing_the_word_under_a_wait_fails_the_wait(device: ahg.Device) -> None:
    word = device.malloc(8)
    stream = device.create_stream()
    done = await stream.wait_value_32(word, 1, F.EQ)
    await asyncio.sleep(0)
    device.free(word)
    with pytest.raises(ahg.InvalidDevicePointer):
        await done
    with pytest.raises(ahg.InvalidDevicePointer):
        await stream.synchronize()
    destroy(stream)


@pytest.mark.asyncio
async def test_failed_memop_calls_change_nothing(ahg_device: ahg.Device) -> None:
    device = ahg_device
    word = device.malloc(8)
    stream = device.create_stream()
    before = (snapshot(), stream.statistics())
    with pytest.raises(ahg.InvalidValue):
        await stream.wait_value_32(word, 1, 17)
    with pytest.raises(ahg.InvalidValue):
        await stream.write_value_32(word + 1, 1)
    with pytest.raises(ValueError, match="fit"):
        await stream.write_value_32(word, 2**32)
    with pytest.raises(ahg.InvalidValue):
        await stream.write_value_64(ahg.NULL, 1)
    assert (snapshot(), stream.statistics()) == before
    stream.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        await stream.write_value_32(word, 1)
    device.free(word)


# -- captured --------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_captured_memops_become_host_nodes_that_replay(ahg_device: ahg.Device) -> None:
    device = ahg_device
    flag, data = device.malloc(8), device.malloc(8)
    stream = device.create_stream(non_blocking=True)
    stream.begin_capture()
    await stream.wait_value_32(flag, 1, F.EQ)
    await stream.write_value_32(data, 42)
    await stream.write_value_32(flag, 0)  # re-arm for the next replay
    graph = stream.end_capture()
    nodes = graph.nodes()
    assert [n.type for n in nodes] == [ahg.NodeType.Host] * 3
    assert isinstance(nodes[0].params.fn, StreamMemOp)
    assert "wait32" in repr(nodes[0].params.fn)
    assert device.view(data, np.uint32, 1)[0] == 0  # captured, not run
    graph_exec = graph.instantiate()
    for round_ in range(2):
        device.view(data, np.uint32, 1)[0] = 0
        handle = await graph_exec.launch(stream)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not handle.done(), round_  # waits for the flag
        device.view(flag, np.uint32, 1)[0] = 1
        await handle
        assert device.view(data, np.uint32, 1)[0] == 42
        assert device.view(flag, np.uint32, 1)[0] == 0
    for handle_ in (graph_exec, graph, stream):
        handle_.destroy()
    device.free(flag)
    device.free(data)


@pytest.mark.asyncio
async def test_a_bad_captured_memop_fails_and_keeps_the_capture(device: ahg.Device) -> None:
    word = device.malloc(8)
    stream = device.create_stream(non_blocking=True)
    stream.begin_capture()
    with pytest.raises(ahg.InvalidValue):
        await stream.wait_value_32(word, 1, 9)
    await stream.write_value_32(word, 1)
    graph = stream.end_capture()
    assert len(graph.nodes()) == 1
    destroy(word, stream, graph)


# -- misuse ----------------------------------------------------------------------------------------


def test_a_wait_left_pending_when_its_loop_closes_fails_instead_of_hanging(
    device: ahg.Device,
) -> None:
    word = device.malloc(8)
    stream = device.create_stream()

    async def first() -> None:
        await stream.wait_value_32(word, 1, F.EQ)  # never satisfied on this loop
        await asyncio.sleep(0)

    asyncio.run(first())  # the loop closes with the wait polling: its task is cancelled

    async def second() -> None:
        with pytest.raises(ahg.HipError):
            await stream.synchronize()
        await stream.write_value_32(word, 5)  # the stream works again
        await stream.synchronize()

    asyncio.run(second())
    assert device.view(word, np.uint32, 1)[0] == 5
    destroy(word, stream)


@pytest.mark.asyncio
async def test_cancelling_the_host_that_awaits_a_wait_leaves_the_device_work_alone(
    device: ahg.Device,
) -> None:
    word = device.malloc(8)
    stream = device.create_stream()
    done = await stream.wait_value_32(word, 1, F.EQ)

    async def host() -> None:
        await done

    task = asyncio.create_task(host())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not done.done()
    await stream.write_value_32(word, 1)  # behind the wait on the same stream: never runs
    await asyncio.sleep(0)
    assert not done.done()
    device.view(word, np.uint32, 1)[0] = 1  # the host releases it
    await stream.synchronize()
    assert done.done()
    destroy(word, stream)


@pytest.mark.asyncio
async def test_destroying_a_stream_with_a_parked_wait_still_completes_it(
    ahg_device: ahg.Device,
) -> None:
    device = ahg_device
    word = device.malloc(8)
    stream = device.create_stream()
    done = await stream.wait_value_32(word, 9, F.GEQ)
    stream.destroy()  # work already enqueued still completes
    device.view(word, np.uint32, 1)[0] = 10
    await done
    device.free(word)
