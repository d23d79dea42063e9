"""Differential property: the dynamic checker reports exactly the calls an independent
happens-before model says race.

Random programs over two devices: three non-blocking streams, the legacy null stream, a
blocking stream and the task's per-thread stream on device 0, a non-blocking stream on device
1; events recorded, re-recorded and waited (including waits on events never recorded);
stream, event and device synchronisations; fills, device copies (1-byte overlaps, adjacent
ranges, zero-size copies), pitched 2D copies with gaps between their rows, peer copies
between the devices, declared host functions, host views; graphs launched on a stream with
an event-wait node before and an event-record node after their memory node, or relaying one
event to another with no memory node between; frees and reallocations, on the host and in
stream order.

The oracle is written from HIP's rules, not from the checker's code: every call is a node of
a happens-before graph (stream order; the null stream after the blocking streams' earlier
work and they after its; record -> wait of the latest record, and a wait for an event never
recorded is no work at all, as in HIP; an empty graph's launch is none either; a host
synchronisation after what it waits for; host program order before every later call), and
its transitive closure decides. A call races iff one of its accesses
overlaps an earlier call's access on the same allocation, one of them writing, and that call
is not an ancestor. A free is a write of its whole allocation, and memory allocated again is
new memory (the free is where a reuse race shows). The checker must report a race during
exactly the calls that race (it names one partner per racing call).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.tools.race import active as race_active

SIZE = 64
EVENTS = 3
# streams: 0-2 non-blocking (device 0), 3 null, 4 blocking, 5 per-thread, 6 non-blocking on
# device 1; buffers 0-1 on device 0, 2 on device 1
NULL, BLOCKING, PER_THREAD, OTHER = 3, 4, 5, 6
LEGACY = (BLOCKING, PER_THREAD)  # blocking streams: ordered with the null stream
DEVICE_OF_STREAM = [0, 0, 0, 0, 0, 0, 1]
DEVICE_OF_BUFFER = [0, 0, 1]
EVENT_STREAMS = [0, 1, 2, NULL, BLOCKING, PER_THREAD]  # events are device 0's


def _range(rng: random.Random, zero: bool = False) -> tuple[int, int]:
    """A start and a length in units of 8 bytes, or a byte-level edge case."""
    roll = rng.random()
    if roll < 0.2:  # 1-byte ranges next to or across a unit boundary
        return rng.randrange(1, 8) * 8 + rng.choice((-1, 0)), 1
    if zero and roll < 0.3:
        return rng.randrange(SIZE), 0
    start = rng.randrange(8) * 8
    return start, rng.randint(1, (SIZE - start) // 8) * 8


def _buffer_on(rng: random.Random, device: int) -> int:
    return rng.choice([b for b, d in enumerate(DEVICE_OF_BUFFER) if d == device])


def program(rng: random.Random, length: int) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for _ in range(length):
        roll = rng.random()
        s = rng.randrange(7)
        here = DEVICE_OF_STREAM[s]
        if roll < 0.18:
            out.append(("fill", s, _buffer_on(rng, here), *_range(rng)))
        elif roll < 0.3:
            ds, n = _range(rng, zero=True)
            ss = rng.randrange(SIZE - n + 1)
            out.append(("copy", s, _buffer_on(rng, here), ds, _buffer_on(rng, here), ss, n))
        elif roll < 0.36:
            width, height = rng.choice((4, 8, 16)), rng.randint(1, 3)
            pitch = max(rng.choice((width, 16, 24)), width)
            last = SIZE - ((height - 1) * pitch + width)
            db, doff = _buffer_on(rng, here), rng.randint(0, last)
            sb, soff = _buffer_on(rng, here), rng.randint(0, last)
            out.append(("copy2d", s, db, doff, sb, soff, width, height, pitch))
        elif roll < 0.41:
            s = rng.randrange(3)  # a device-0 stream copying between the devices
            ds, n = _range(rng, zero=True)
            ss = rng.randrange(SIZE - n + 1)
            out.append(("peer", s, rng.randrange(3), ds, rng.randrange(3), ss, n))
        elif roll < 0.46:
            start, n = _range(rng)
            out.append(("host", s, _buffer_on(rng, here), start, n, rng.random() < 0.5))
        elif roll < 0.5:
            start, n = _range(rng)
            out.append(("view", rng.randrange(3), start, n, rng.random() < 0.5))
        elif roll < 0.61:
            out.append(("record", rng.choice(EVENT_STREAMS), rng.randrange(EVENTS)))
        elif roll < 0.72:
            out.append(("wait", rng.choice([*EVENT_STREAMS, OTHER]), rng.randrange(EVENTS)))
        elif roll < 0.79:
            s = rng.choice(EVENT_STREAMS)
            wait = rng.choice((None, rng.randrange(EVENTS)))
            record = rng.choice((None, rng.randrange(EVENTS)))
            fill = None if rng.random() < 0.25 else (rng.randrange(2), *_range(rng))
            out.append(("graph", s, wait, fill, record))
        elif roll < 0.84:
            out.append(("sync", s))
        elif roll < 0.87:
            out.append(("evsync", rng.randrange(EVENTS)))
        elif roll < 0.9:
            out.append(("devsync", rng.randrange(2)))
        elif roll < 0.95:
            out.append(("realloc", rng.randrange(3)))
        else:
            s = rng.randrange(3)
            out.append(("arealloc", s, _buffer_on(rng, 0)))
    return out


def oracle(prog: list[tuple[Any, ...]]) -> list[bool]:
    """Per call of ``prog``: does it race with an earlier call?"""
    preds: list[set[int]] = []
    last: dict[int, int] = {}  # stream -> its last node
    host: int | None = None  # the host's last node
    recorded: dict[int, int] = {}  # event -> its latest record node
    generation = [0] * len(DEVICE_OF_BUFFER)
    # (call, node, (buffer, generation), start, end, write)
    accesses: list[tuple[int, int, tuple[int, int], int, int, bool]] = []

    def node(*deps: int | None) -> int:
        preds.append({d for d in deps if d is not None})
        return len(preds) - 1

    def stream_node(s: int, *deps: int | None) -> int:
        legacy: list[int | None] = []
        if s == NULL:  # the null stream waits for the blocking streams' earlier work
            legacy = [last.get(b) for b in LEGACY]
        elif s in LEGACY:  # and they for its
            legacy = [last.get(NULL)]
        n = node(last.get(s), host, *legacy, *deps)
        last[s] = n
        return n

    def touch(call: int, n: int, buffer: int, start: int, size: int, write: bool) -> None:
        if size:
            key = (buffer, generation[buffer])
            accesses.append((call, n, key, start, start + size, write))

    for call, act in enumerate(prog):
        kind = act[0]
        if kind == "fill":
            _, s, b, start, size = act
            touch(call, stream_node(s), b, start, size, True)
        elif kind in ("copy", "peer"):
            _, s, db, ds, sb, ss, size = act
            if not size or (kind == "copy" and (db, ds) == (sb, ss)):
                continue  # HIP enqueues nothing: 0 bytes, or a copy onto itself (Default kind)
            n = stream_node(s)
            touch(call, n, db, ds, size, True)
            touch(call, n, sb, ss, size, False)
        elif kind == "copy2d":
            _, s, db, doff, sb, soff, width, height, pitch = act
            n = stream_node(s)
            for row in range(height):
                touch(call, n, db, doff + row * pitch, width, True)
                touch(call, n, sb, soff + row * pitch, width, False)
        elif kind == "host":
            _, s, b, start, size, write = act
            touch(call, stream_node(s), b, start, size, write)
        elif kind == "view":
            _, b, start, size, write = act
            host = node(host)
            touch(call, host, b, start, size, write)
        elif kind == "record":
            recorded[act[2]] = stream_node(act[1])
        elif kind == "wait":
            if act[2] in recorded:  # a wait for an event never recorded is no stream work
                stream_node(act[1], recorded[act[2]])
        elif kind == "graph" and act[2:] == (None, None, None):
            pass  # an empty graph launches as a no-op: no stream work at all
        elif kind == "graph":
            _, s, wait, fill, record = act
            n = stream_node(s, None if wait is None else recorded.get(wait))
            if fill is not None:
                n = node(n)
                touch(call, n, fill[0], fill[1], fill[2], True)
            if record is not None:
                n = node(n)
                recorded[record] = n
            last[s] = n  # later work on the stream follows the whole launch
        elif kind == "sync":
            s = act[1]
            covered = [last.get(s)]
            if s == NULL:
                covered += [last.get(b) for b in LEGACY]
            host = node(host, *covered)
        elif kind == "evsync":
            host = node(host, recorded.get(act[1]))
        elif kind == "devsync":
            streams = [s for s, d in enumerate(DEVICE_OF_STREAM) if d == act[1]]
            host = node(host, *(last.get(s) for s in streams))
        elif kind == "realloc":
            host = node(host)  # a free: a host write of the whole allocation, then new memory
            touch(call, host, act[1], 0, SIZE, True)
            generation[act[1]] += 1
        else:  # arealloc: free_async, then malloc_async, on one stream
            _, s, b = act
            touch(call, stream_node(s), b, 0, SIZE, True)
            generation[b] += 1
            touch(call, stream_node(s), b, 0, SIZE, True)
    reach: list[set[int]] = []
    for deps in preds:
        seen: set[int] = set()
        for d in deps:
            seen |= reach[d] | {d}
        reach.append(seen)
    racing = [False] * len(prog)
    for i, (ci, ni, ki, si, ei, wi) in enumerate(accesses):
        for cj, nj, kj, sj, ej, wj in accesses[:i]:
            if cj == ci or kj != ki or not (si < ej and sj < ei) or not (wi or wj):
                continue
            if nj not in reach[ni]:
                racing[ci] = True
    return racing


async def run(
    prog: list[tuple[Any, ...]],
) -> tuple[list[bool], list[str], ahg.RaceCheckStatistics | None]:
    """Per call: did the checker report a race during it; the reports' text; the checker's
    statistics after the check ended (None inside an outer check, which keeps them)."""
    nested = race_active()
    with ahg.race_check(on_race="collect") as empty:
        pass
    baseline = empty.statistics()
    ahg.configure_devices(2)  # fresh devices: the same addresses on every run
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    devices = [d0, d1]
    streams = [d0.create_stream(non_blocking=True) for _ in range(3)]
    streams += [d0.null_stream, d0.create_stream(), d0.per_thread_stream()]
    streams.append(d1.create_stream(non_blocking=True))
    events = [d0.create_event() for _ in range(EVENTS)]
    buffers = [devices[d].malloc(SIZE) for d in DEVICE_OF_BUFFER]
    made: list[Any] = []  # graphs and executables, destroyed at the end
    raced: list[bool] = []

    def noop() -> None:
        pass

    with ahg.race_check(on_race="collect") as rc:
        for act in prog:
            before = len(rc.reports)
            kind = act[0]
            if kind == "fill":
                _, s, b, start, size = act
                await streams[s].memset(buffers[b] + start, 1, size)
            elif kind == "copy":
                _, s, db, ds, sb, ss, size = act
                await streams[s].memcpy(buffers[db] + ds, buffers[sb] + ss, size)
            elif kind == "copy2d":
                _, s, db, doff, sb, soff, width, height, pitch = act
                await streams[s].memcpy_2d(
                    buffers[db] + doff, pitch, buffers[sb] + soff, pitch, width, height
                )
            elif kind == "peer":
                _, s, db, ds, sb, ss, size = act
                await streams[s].memcpy_peer(
                    buffers[db] + ds, DEVICE_OF_BUFFER[db], buffers[sb] + ss,
                    DEVICE_OF_BUFFER[sb], size,
                )  # fmt: skip
            elif kind == "host":
                _, s, b, start, size, write = act
                region = [(buffers[b] + start, size)]
                fn = ahg.host_function(noop, reads=[] if write else region,
                                       writes=region if write else [])  # fmt: skip
                await streams[s].launch_host_func(fn)
            elif kind == "view":
                _, b, start, size, write = act
                devices[DEVICE_OF_BUFFER[b]].view(
                    buffers[b] + start, np.uint8, size, readonly=not write
                )
            elif kind == "record":
                await streams[act[1]].record_event(events[act[2]])
            elif kind == "wait":
                await streams[act[1]].wait_event(events[act[2]])
            elif kind == "graph":
                _, s, wait, fill, record = act
                graph = ahg.Graph()
                deps: list[Any] = []
                if wait is not None:
                    deps = [graph.add_event_wait_node(events[wait])]
                if fill is not None:
                    b, start, size = fill
                    deps = [graph.add_memset_node(buffers[b] + start, 2, size, deps=deps)]
                if record is not None:
                    graph.add_event_record_node(events[record], deps=deps)
                executable = graph.instantiate()
                made += [executable, graph]
                await executable.launch(streams[s])
            elif kind == "sync":
                await settled(streams[act[1]].synchronize)
            elif kind == "evsync":
                await settled(events[act[1]].synchronize)
            elif kind == "devsync":
                await settled(devices[act[1]].synchronize)
            elif kind == "realloc":
                device = devices[DEVICE_OF_BUFFER[act[1]]]
                device.free(buffers[act[1]])
                buffers[act[1]] = device.malloc(SIZE)
            else:
                _, s, b = act
                await streams[s].free_async(buffers[b])
                buffers[b] = await streams[s].malloc_async(SIZE)
            raced.append(len(rc.reports) > before)
        for device in devices:
            while not await settled(device.synchronize):
                pass  # one failure per call
        texts = [str(report) for report in rc.reports]
    after = None if nested else rc.statistics()
    assert after is None or dataclasses.replace(after, reports=0) == baseline, (after, baseline)
    for thing in made:
        thing.destroy()
    for stream in streams:
        if not stream.is_null and stream is not streams[PER_THREAD]:
            stream.destroy()
    for event in events:
        event.destroy()
    for b, ptr in enumerate(buffers):
        devices[DEVICE_OF_BUFFER[b]].free(ptr)
    return raced, texts, after


async def settled(synchronize: Any) -> bool:
    """Synchronise; False if it raised the failure of an op that ran on memory a racing free
    had already released (the race's consequence, reported at the free; the host still waited,
    so the ordering holds)."""
    try:
        await synchronize()
    except ahg.HipError:
        return False
    return True


def check(seed: int, length: int) -> bool:
    prog = program(random.Random(seed), length)
    raced, _, _ = asyncio.run(run(prog))
    expected = oracle(prog)
    assert raced == expected, (seed, [(i, a) for i, a in enumerate(prog)], raced, expected)
    return any(expected)


def test_random_programs_match_the_happens_before_oracle() -> None:
    racing = sum(check(seed, random.Random(-seed).randint(4, 24)) for seed in range(120))
    assert racing > 40  # the programs really race, and really do not


@pytest.mark.slow
@pytest.mark.timeout(600)  # 2,000 programs: a minute on its own, several on a busy machine
def test_many_random_programs_match_the_happens_before_oracle() -> None:
    for seed in range(1000, 3000):
        check(seed, random.Random(-seed).randint(4, 40))


def canonical(texts: list[str]) -> list[str]:
    """``texts`` with handle numbers ("stream #5", "node 81") renamed in order of first
    appearance: they come from process-wide registries, whose free slots are handed out again
    in an order of their own, not from the checker; and op numbers, which count from the
    outermost check's start (the environment switch's, when it is on)."""
    names: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        return names.setdefault(match[0], f"{match[1]} <{len(names)}>")

    pattern = r"(stream|event|graph exec|node|op) #?\d+"
    return [re.sub(pattern, rename, text) for text in texts]


def test_the_same_program_gives_the_same_report_text() -> None:
    for seed in range(10):
        prog = program(random.Random(seed), 24)
        first = asyncio.run(run(prog))[1]
        assert canonical(first) == canonical(asyncio.run(run(prog))[1])
        assert all(re.search(r"test_race_oracle\.py:\d+", text) for text in first)
