"""Stress: many tasks and threads instantiating, launching, updating and destroying at once.

Each test ends by proving that nothing leaked: device memory, every registry and every pool are
back at their baseline, and every user-object destructor ran exactly once.
"""

from __future__ import annotations

import asyncio
import random
import threading

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.graph_exec import EXECS
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.node import NODES
from ahipgraph.lifetime.user_object import USER_OBJECTS
from ahipgraph.runtime.stream import STREAMS


@ahg.kernel
def add(t: ahg.Threads, n: ahg.int32, value: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[:n] += value


def registry_counts() -> dict[str, int]:
    return {
        "graphs": len(GRAPHS),
        "nodes": len(NODES),
        "execs": len(EXECS),
        "streams": len(STREAMS),
        "user objects": len(USER_OBJECTS),
    }


def diamond(x: ahg.DevicePtr, value: int, owner: ahg.UserObject | None = None) -> ahg.Graph:
    """x += value four times, through a fork and a join."""
    graph = ahg.Graph()
    top = graph.add_kernel_node(add, 1, 1, (4, value, x))
    left = graph.add_kernel_node(add, 1, 1, (4, value, x), deps=[top])
    right = graph.add_kernel_node(add, 1, 1, (4, value, x), deps=[top])
    graph.add_kernel_node(add, 1, 1, (4, value, x), deps=[left, right])
    if owner is not None:
        graph.retain_user_object(owner)
    return graph


@pytest.mark.asyncio
async def test_many_tasks_launch_update_and_destroy_concurrently(device: ahg.Device) -> None:
    baseline_memory = device.memory.bytes_in_use
    baseline = registry_counts()
    destroyed: list[int] = []
    rng = random.Random(1234)

    async def worker(index: int) -> int:
        x = device.malloc(16)
        stream = device.create_stream(non_blocking=index % 2 == 0)
        owner = ahg.UserObject(destroyed.append, data=index)
        graph = diamond(x, 1, owner)
        owner.release()  # the graph holds the only reference now
        exec_ = graph.instantiate()
        graph.destroy()  # the executable keeps running without its graph
        value, expected = 1, 0
        for step in range(40):
            if step % 7 == 3:
                # Update from a fresh graph of the same shape, while earlier launches of this
                # executable may still be in flight: they keep their old arguments.
                value = rng.randint(2, 5)
                fresh = diamond(x, value)
                exec_.update(fresh)
                fresh.destroy()
            await exec_.launch(stream)
            expected += 4 * value
            if step % 5 == 0:
                await asyncio.sleep(0)  # let the other workers interleave their launches here
        exec_.destroy()  # launches may still be in flight: they complete first
        await stream.synchronize()
        result = int(device.view(x, np.int32, 4)[0])
        stream.destroy()
        device.free(x)
        assert result == expected
        return result

    results = await asyncio.gather(*(worker(i) for i in range(16)))
    assert all(r > 0 for r in results)
    await device.synchronize()
    assert sorted(destroyed) == list(range(16))  # every destructor, exactly once
    assert device.memory.bytes_in_use == baseline_memory
    assert registry_counts() == baseline


@pytest.mark.asyncio
async def test_threads_destroy_executables_while_the_loop_launches_them(
    device: ahg.Device,
) -> None:
    baseline_memory = device.memory.bytes_in_use
    baseline = registry_counts()
    destroyed: list[int] = []
    x = device.malloc(16)
    stream = device.create_stream()
    execs = []
    for i in range(24):
        owner = ahg.UserObject(destroyed.append, data=i)
        graph = diamond(x, 1, owner)
        owner.release()
        execs.append(graph.instantiate())
        graph.destroy()
    handles = [await exec_.launch(stream) for exec_ in execs for _ in range(3)]
    # Threads destroy every executable while all 72 launches are still queued.
    start = threading.Barrier(4)

    def destroy(chunk: list[ahg.GraphExec]) -> None:
        start.wait()
        for exec_ in chunk:
            exec_.destroy()

    threads = [threading.Thread(target=destroy, args=(execs[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert destroyed == []  # launches in flight keep every executable, and its user object
    for exec_ in execs:
        with pytest.raises(ahg.InvalidValue):
            await exec_.launch(stream)
    for handle in handles:
        await handle
    assert int(device.view(x, np.int32, 4)[0]) == 72 * 4
    assert sorted(destroyed) == list(range(24))
    stream.destroy()
    device.free(x)
    assert device.memory.bytes_in_use == baseline_memory
    assert registry_counts() == baseline
