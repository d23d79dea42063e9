"""Capture == eager == numpy over every kind of stream operation a capture turns into a node.

``test_capture_random`` covers kernels, byte fills, copies, host functions and event pairs. This
property adds the rest of what a capture records: partial kernels, fills of 2- and 4-byte
elements, pitched copies, copies from and to host arrays, stream memory writes (host nodes),
stream-ordered scratch memory (``malloc_async`` / ``free_async``: MemAlloc and MemFree nodes),
external event records and waits (EventRecord / EventWait nodes), and ordering through
``update_capture_dependencies`` where the eager program uses an event. A program runs three
ways over ``STREAMS`` streams and ``BUFFERS`` int64 buffers (plus ``HOSTS`` host arrays):
eagerly, captured and replayed, and in numpy. Then the same program is captured again and
the executable updated to the new graph (new allocation addresses, new host-function and
event arguments), and its replay must agree too. Every capture leaves nothing behind.

Programs are race-free by construction: before an operation touches a buffer last touched
from another stream, the two streams are ordered: by an event pair, or, for every other
operation, while capturing, by ``update_capture_dependencies`` alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ahipgraph as ahg
from capture_helpers import NBYTES, Baseline, N, affine, no_capture_left

STREAMS = 3
BUFFERS = 3
HOSTS = 2
ROWS, COLS = 4, N // 4  # a buffer seen as a pitched 4 x 4 matrix of int64
PITCH = COLS * 8

Op = tuple[Any, ...]

_stream = st.integers(0, STREAMS - 1)
_buf = st.integers(0, BUFFERS - 1)

op_strategy = st.one_of(
    st.tuples(
        st.just("kernel"),
        _stream,
        _buf,
        _buf,
        st.integers(-3, 3),
        st.integers(-5, 5),
        st.integers(0, N),
    ),
    st.tuples(st.just("fill"), _stream, _buf, st.sampled_from([1, 2, 4]), st.integers(0, 255)),
    st.tuples(st.just("copy"), _stream, _buf, _buf),
    st.tuples(
        st.just("copy2d"),
        _stream,
        _buf,
        st.integers(1, BUFFERS - 1),
        st.integers(1, COLS),
        st.integers(1, ROWS),
    ),
    st.tuples(st.just("upload"), _stream, _buf, st.integers(-9, 9)),
    st.tuples(st.just("readback"), _stream, _buf, st.integers(0, HOSTS - 1)),
    st.tuples(st.just("host"), _stream, _buf, st.integers(1, 9)),
    st.tuples(st.just("write64"), _stream, _buf, st.integers(0, N - 1), st.integers(0, 99)),
    st.tuples(st.just("scratch"), _stream, _buf, _buf, st.integers(-3, 3), st.integers(-5, 5)),
    st.tuples(st.just("xrecord"), _stream),
    st.tuples(st.just("xwait"), _stream),
    st.tuples(st.just("sync"), _stream, _stream),
    st.tuples(st.just("depsync"), _stream, _stream),
)

# Nodes each kind adds when captured (a scratch is alloc, fill, kernel, copy, free).
NODES = {"scratch": 5, "sync": 0, "depsync": 0}


def touched(op: Op) -> tuple[int, ...]:
    """Buffers (0..BUFFERS-1) and host arrays (BUFFERS + slot) the operation reads or writes."""
    kind = op[0]
    if kind in ("kernel", "copy", "scratch"):
        return (op[2], op[3])
    if kind == "copy2d":
        return (op[2], (op[2] + op[3]) % BUFFERS)
    if kind == "readback":
        return (op[2], BUFFERS + op[3])
    if kind in ("fill", "upload", "host", "write64"):
        return (op[2],)
    return ()


def uploaded(value: int) -> np.ndarray:
    return np.arange(N, dtype=np.int64) * value - value


def reference(program: list[Op]) -> tuple[np.ndarray, np.ndarray]:
    bufs = np.zeros((BUFFERS, N), dtype=np.int64)
    hosts = np.zeros((HOSTS, N), dtype=np.int64)
    for op in program:
        kind = op[0]
        if kind == "kernel":
            _, _, src, dst, mul, add, n = op
            bufs[dst, :n] = bufs[dst, :n] * 3 + mul * bufs[src, :n] + add
        elif kind == "fill":
            _, _, b, size, value = op
            dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}[size]
            element = value * 0x01010101 & (1 << (8 * size)) - 1  # spread over the element
            bufs[b] = np.full(NBYTES // size, element, dtype=dtype).view(np.int64)
        elif kind == "copy":
            bufs[op[3]] = bufs[op[2]]
        elif kind == "copy2d":
            _, _, src, step, width, height = op
            dst = (src + step) % BUFFERS
            bufs[dst].reshape(ROWS, COLS)[:height, :width] = bufs[src].reshape(ROWS, COLS)[
                :height, :width
            ]
        elif kind == "upload":
            bufs[op[2]] = uploaded(op[3])
        elif kind == "readback":
            hosts[op[3]] = bufs[op[2]]
        elif kind == "host":
            bufs[op[2]] += op[3]
        elif kind == "write64":
            bufs[op[2], op[3]] = op[4]
        elif kind == "scratch":
            _, _, src, dst, mul, add = op
            bufs[dst] = mul * bufs[src] + add  # the scratch starts zeroed
    return bufs, hosts


class Program:
    """One program's streams, buffers, host arrays and events, issued eagerly or captured."""

    def __init__(self, device: ahg.Device, program: list[Op]) -> None:
        self.device = device
        self.program = program
        self.streams = [device.create_stream() for _ in range(STREAMS)]
        self.bufs = [device.malloc(NBYTES) for _ in range(BUFFERS)]
        self.hosts = np.zeros((HOSTS, N), dtype=np.int64)
        self.uploads = {op[3]: uploaded(op[3]) for op in program if op[0] == "upload"}
        self.events: list[ahg.Event] = []
        self.done = device.create_event()  # recorded eagerly once: external waits wait on it

    async def order(self, src: int, dst: int, capturing: bool, *, through_deps: bool) -> None:
        if src == dst:
            return
        if through_deps and capturing:
            deps = self.streams[src].capture_info().dependencies
            self.streams[dst].update_capture_dependencies(deps, ahg.CaptureDependencies.ADD)
            return
        event = self.device.create_event()
        self.events.append(event)
        await self.streams[src].record_event(event)
        await self.streams[dst].wait_event(event)

    async def play(self, capturing: bool) -> int:
        """Issue the program; return how many nodes a capture of it makes."""
        device, streams, bufs = self.device, self.streams, self.bufs
        for s in range(1, STREAMS):
            await self.order(0, s, capturing, through_deps=False)  # fork every stream in
        last: dict[int, int] = {}
        nodes = 0

        def bump(ptr: ahg.DevicePtr, add: int) -> None:
            view = device.view(ptr, np.int64, N)
            view += add

        for index, op in enumerate(self.program):
            kind, s = op[0], op[1]
            if kind in ("sync", "depsync"):
                await self.order(op[1], op[2], capturing, through_deps=kind == "depsync")
                continue
            for item in touched(op):
                if last.get(item, s) != s:
                    # every other hazard is ordered through the dependency update alone, so
                    # the captured graph is right only if the update orders as an event does
                    await self.order(last[item], s, capturing, through_deps=index % 2 == 0)
                last[item] = s
            nodes += NODES.get(kind, 1)
            stream = streams[s]
            if kind == "kernel":
                _, _, src, dst, mul, add, n = op
                await stream.launch_kernel(affine, 1, N, (n, mul, add, bufs[src], bufs[dst]))
            elif kind == "fill":
                _, _, b, size, value = op
                element = value * 0x01010101 & (1 << (8 * size)) - 1
                await stream.memset(bufs[b], element, NBYTES // size, element_size=size)
            elif kind == "copy":
                await stream.memcpy(bufs[op[3]], bufs[op[2]], NBYTES)
            elif kind == "copy2d":
                _, _, src, step, width, height = op
                dst = (src + step) % BUFFERS
                await stream.memcpy_2d(bufs[dst], PITCH, bufs[src], PITCH, width * 8, height)
            elif kind == "upload":
                await stream.memcpy(bufs[op[2]], self.uploads[op[3]])
            elif kind == "readback":
                await stream.memcpy(self.hosts[op[3]], bufs[op[2]])
            elif kind == "host":
                await stream.launch_host_func(bump, bufs[op[2]], op[3])
            elif kind == "write64":
                _, _, b, index, value = op
                await stream.write_value_64(bufs[b] + index * 8, value)
            elif kind == "scratch":
                _, _, src, dst, mul, add = op
                tmp = await stream.malloc_async(NBYTES)
                await stream.memset(tmp, 0, NBYTES)
                await stream.launch_kernel(affine, 1, N, (N, mul, add, bufs[src], tmp))
                await stream.memcpy(bufs[dst], tmp, NBYTES)
                await stream.free_async(tmp)
            elif kind == "xrecord":
                event = device.create_event()
                self.events.append(event)
                await stream.record_event(event, flags=1)  # hipEventRecordExternal
            else:  # xwait: on an event recorded (and done) before the program
                await stream.wait_event(self.done, flags=1)  # hipEventWaitExternal
        for s in range(1, STREAMS):
            await self.order(s, 0, capturing, through_deps=False)  # join every stream back
        return nodes

    def read(self) -> np.ndarray:
        return np.stack([self.device.view(b, np.int64, N).copy() for b in self.bufs])

    async def reset(self) -> None:
        for b in self.bufs:
            await self.streams[0].memset(b, 0, NBYTES)
        self.hosts[:] = 0
        await self.streams[0].synchronize()

    async def capture(self) -> ahg.Graph:
        self.streams[0].begin_capture()
        nodes = await self.play(capturing=True)
        graph = self.streams[0].end_capture()
        assert len(graph.nodes()) == nodes
        return graph

    def close(self) -> None:
        for event in [*self.events, self.done]:
            event.destroy()
        for b in self.bufs:
            self.device.free(b)
        for stream in self.streams:
            stream.destroy()


async def run_three_ways(program: list[Op]) -> None:
    device = ahg.get_device(0)
    kit = Program(device, program)
    expected_bufs, expected_hosts = reference(program)
    await kit.streams[0].record_event(kit.done)

    await kit.play(capturing=False)
    await kit.streams[0].synchronize()  # stream 0 joined every other stream
    await device.synchronize()
    np.testing.assert_array_equal(kit.read(), expected_bufs)
    np.testing.assert_array_equal(kit.hosts, expected_hosts)

    await kit.reset()
    before = Baseline.take(device)
    graph = await kit.capture()
    no_capture_left()
    exec_ = graph.instantiate()
    await (await exec_.launch(kit.streams[1]))
    np.testing.assert_array_equal(kit.read(), expected_bufs)
    np.testing.assert_array_equal(kit.hosts, expected_hosts)

    await kit.reset()
    again = await kit.capture()  # the same program, recaptured: same topology, new arguments
    result = exec_.update(again)
    assert result.ok, result
    await (await exec_.launch(kit.streams[2]))
    np.testing.assert_array_equal(kit.read(), expected_bufs)
    np.testing.assert_array_equal(kit.hosts, expected_hosts)

    exec_.destroy()
    graph.destroy()
    again.destroy()
    no_capture_left()
    assert Baseline.take(device) == before
    kit.close()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op_strategy, max_size=20))
def test_capture_equals_eager_equals_numpy_over_every_captured_kind(program: list[Op]) -> None:
    ahg.configure_devices(1)
    ahg.run(run_three_ways(program))


def test_a_fixed_program_of_every_kind() -> None:
    program: list[Op] = [
        ("upload", 0, 0, 3),
        ("kernel", 1, 0, 1, 2, 1, 10),
        ("fill", 2, 2, 2, 7),
        ("copy2d", 2, 2, 1, 3, 2),
        ("scratch", 1, 1, 2, -2, 4),
        ("xrecord", 1),
        ("depsync", 1, 0),
        ("write64", 0, 2, 5, 42),
        ("xwait", 2),
        ("host", 2, 0, 4),
        ("readback", 0, 2, 1),
        ("fill", 1, 0, 4, 200),
        ("readback", 2, 0, 0),
    ]
    ahg.run(run_three_ways(program))
