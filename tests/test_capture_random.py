"""Capture == eager == numpy, for random programs of stream operations over several streams.

A program is a list of operations, each on one of ``STREAMS`` streams, over ``BUFFERS`` int64
buffers: kernels (``affine``, not idempotent), byte fills, copies, host functions, and explicit
event record/wait pairs. Before an operation touches a buffer last touched from another stream,
the program orders the two streams through an event, so the program is race-free and its
meaning is the sequential one numpy computes. Stream 0 forks every stream in at the start and
joins them back at the end, so the same program is a valid capture.

The program runs three ways: eagerly on the streams, captured from the same code and replayed,
and in numpy; all three agree, and every capture leaves nothing behind.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ahipgraph as ahg
from capture_helpers import NBYTES, Baseline, N, affine, no_capture_left

STREAMS = 3
BUFFERS = 4

Op = tuple[Any, ...]

op_strategy = st.one_of(
    st.tuples(
        st.just("kernel"),
        st.integers(0, STREAMS - 1),
        st.integers(0, BUFFERS - 1),
        st.integers(0, BUFFERS - 1),
        st.integers(-3, 3),
        st.integers(-5, 5),
    ),
    st.tuples(
        st.just("fill"), st.integers(0, STREAMS - 1), st.integers(0, BUFFERS - 1), st.integers(0, 3)
    ),
    st.tuples(
        st.just("copy"),
        st.integers(0, STREAMS - 1),
        st.integers(0, BUFFERS - 1),
        st.integers(0, BUFFERS - 1),
    ),
    st.tuples(
        st.just("host"), st.integers(0, STREAMS - 1), st.integers(0, BUFFERS - 1), st.integers(1, 9)
    ),
    st.tuples(st.just("sync"), st.integers(0, STREAMS - 1), st.integers(0, STREAMS - 1)),
)


def touched(op: Op) -> tuple[int, ...]:
    kind = op[0]
    if kind == "kernel" or kind == "copy":
        return (op[2], op[3])
    if kind in ("fill", "host"):
        return (op[2],)
    return ()


def reference(program: list[Op]) -> np.ndarray:
    bufs = np.zeros((BUFFERS, N), dtype=np.int64)
    for op in program:
        kind = op[0]
        if kind == "kernel":
            _, _, src, dst, mul, add = op
            bufs[dst] = bufs[dst] * 3 + mul * bufs[src] + add
        elif kind == "fill":
            bufs[op[2]] = np.frombuffer(bytes([op[3]]) * 8, dtype=np.int64)[0]
        elif kind == "copy":
            bufs[op[3]] = bufs[op[2]]
        elif kind == "host":
            bufs[op[2]] += op[3]
    return bufs


async def play(device: ahg.Device, streams: list[ahg.Stream], bufs: list[ahg.DevicePtr],
               program: list[Op], events: list[ahg.Event]) -> int:  # fmt: skip
    """Issue the program on the streams (captured or not); return the operations issued."""

    async def order(src: int, dst: int) -> None:
        if src != dst:
            event = device.create_event()
            events.append(event)
            await streams[src].record_event(event)
            await streams[dst].wait_event(event)

    def bump(ptr: ahg.DevicePtr, add: int) -> None:
        view = device.view(ptr, np.int64, N)
        view += add

    await order(0, 0)
    for s in range(1, STREAMS):
        await order(0, s)  # fork every stream in
    last: dict[int, int] = {}
    issued = 0
    for op in program:
        kind, s = op[0], op[1]
        if kind == "sync":
            await order(op[1], op[2])
            continue
        for buf in touched(op):
            if last.get(buf, s) != s:
                await order(last[buf], s)
            last[buf] = s
        stream = streams[s]
        if kind == "kernel":
            _, _, src, dst, mul, add = op
            await stream.launch_kernel(affine, 1, N, (N, mul, add, bufs[src], bufs[dst]))
        elif kind == "fill":
            await stream.memset(bufs[op[2]], op[3], NBYTES)
        elif kind == "copy":
            await stream.memcpy(bufs[op[3]], bufs[op[2]], NBYTES)
        else:
            await stream.launch_host_func(bump, bufs[op[2]], op[3])
        issued += 1
    for s in range(1, STREAMS):
        await order(s, 0)  # join every stream back
    return issued


def read(device: ahg.Device, bufs: list[ahg.DevicePtr]) -> np.ndarray:
    return np.stack([device.view(b, np.int64, N).copy() for b in bufs])


async def run_three_ways(program: list[Op]) -> None:
    device = ahg.get_device(0)
    streams = [device.create_stream() for _ in range(STREAMS)]
    bufs = [device.malloc(NBYTES) for _ in range(BUFFERS)]
    events: list[ahg.Event] = []
    expected = reference(program)

    await play(device, streams, bufs, program, events)
    await streams[0].synchronize()  # stream 0 joined every other stream
    eager = read(device, bufs)

    for b in bufs:
        await streams[0].memset(b, 0, NBYTES)
    await streams[0].synchronize()
    before = Baseline.take(device)
    streams[0].begin_capture()
    issued = await play(device, streams, bufs, program, events)
    graph = streams[0].end_capture()
    assert len(graph.nodes()) == issued  # record/wait pairs add no node
    exec_ = graph.instantiate()
    await (await exec_.launch(streams[1]))
    captured = read(device, bufs)
    exec_.destroy()
    graph.destroy()
    for event in events:
        event.destroy()
    assert Baseline.take(device) == before
    no_capture_left()
    np.testing.assert_array_equal(eager, expected)
    np.testing.assert_array_equal(captured, expected)
    for b in bufs:
        device.free(b)
    for stream in streams:
        stream.destroy()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op_strategy, max_size=25))
def test_capture_equals_eager_equals_numpy(program: list[Op]) -> None:
    ahg.configure_devices(1)
    ahg.run(run_three_ways(program))


def test_a_fixed_program_over_three_streams() -> None:
    program: list[Op] = [
        ("fill", 0, 0, 1),
        ("kernel", 1, 0, 1, 2, 3),
        ("host", 2, 1, 4),
        ("copy", 0, 1, 2),
        ("sync", 2, 1),
        ("kernel", 1, 2, 3, -1, 5),
        ("kernel", 2, 3, 0, 3, 0),
    ]
    ahg.run(run_three_ways(program))
