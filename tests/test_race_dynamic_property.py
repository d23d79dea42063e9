"""Property: the dynamic checker flags exactly the ops that race with an earlier op.

Random eager programs over three non-blocking streams (fills and reads of small ranges, event
records and waits, stream and device synchronisations) run under ``ahg.race_check``. The oracle
builds the happens-before graph from the API's promises alone (stream order, record -> wait,
stream/device synchronisation -> later enqueues) and takes its transitive closure. An op must be
reported as the later side of a race iff some earlier conflicting op does not reach it.
(The checker names one partner per racing op; which one depends on what shadow memory kept, so
the property is stated over the later ops.)
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import ahipgraph as ahg

UNIT = 16
STREAMS = 3  # non-blocking streams 0..2; the seeded programs also use 3 (null) and 4 (blocking)
EVENTS = 2
NULL, BLOCKING = 3, 4


@ahg.kernel(extents={"src": "n"})
def read(t: ahg.Threads, n: ahg.int32, src: ahg.ConstPtr[ahg.float32]) -> None:
    pass


op = st.tuples(
    st.just("op"),
    st.integers(0, STREAMS - 1),
    st.booleans(),
    st.integers(0, 1),
    st.integers(0, 3),
    st.integers(1, 3),
)
record = st.tuples(st.just("record"), st.integers(0, STREAMS - 1), st.integers(0, EVENTS - 1))
wait = st.tuples(st.just("wait"), st.integers(0, STREAMS - 1), st.integers(0, EVENTS - 1))
sync = st.tuples(st.just("sync"), st.integers(0, STREAMS - 1))
# Mostly ops, records and waits, so that races and their near misses are common.
action = st.one_of(op, op, op, op, record, wait, record, wait, sync, st.tuples(st.just("devsync")))


def oracle(program: list[tuple[Any, ...]]) -> set[int]:
    """Indices (among ops) of ops with an earlier conflicting op that does not reach them."""
    preds: list[set[int]] = []  # happens-before predecessors of each trace node
    last: dict[int, int] = {}  # stream -> its last node
    host: int | None = None  # the host's last synchronisation node
    recorded: dict[int, int] = {}  # event -> its latest record node
    ops: list[tuple[int, tuple[Any, ...]]] = []  # (node, action)

    def node(deps: list[int | None]) -> int:
        preds.append({d for d in deps if d is not None})
        return len(preds) - 1

    for act in program:
        kind = act[0]
        if kind == "wait" and act[2] not in recorded:
            continue  # waiting for an event never recorded is a no-op, as in HIP
        if kind in ("op", "record", "wait"):
            stream = act[1]
            deps = [last.get(stream), host]
            if stream == NULL:  # legacy default stream: after blocking streams' work
                deps.append(last.get(BLOCKING))
            elif stream == BLOCKING:  # and blocking streams after the null stream's
                deps.append(last.get(NULL))
            if kind == "wait" and act[2] in recorded:
                deps.append(recorded[act[2]])
            n = node(deps)
            last[stream] = n
            if kind == "record":
                recorded[act[2]] = n
            if kind == "op":
                ops.append((n, act))
        elif kind == "sync":
            covered = [last.get(act[1])]
            if act[1] == NULL:  # syncing the null stream covers what it would wait for
                covered.append(last.get(BLOCKING))
            host = node([host, *covered])
        else:
            host = node([host, *last.values()])
    reach: list[set[int]] = []  # all ancestors of each node
    for deps in preds:
        seen: set[int] = set()
        for d in deps:
            seen |= reach[d] | {d}
        reach.append(seen)
    racing = set()
    for i, (ni, ai) in enumerate(ops):
        for nj, aj in ops[:i]:
            overlap = ai[3] == aj[3] and ai[4] < aj[4] + aj[5] and aj[4] < ai[4] + ai[5]
            if overlap and (ai[2] or aj[2]) and nj not in reach[ni]:
                racing.add(i)
                break
    return racing


async def run(program: list[tuple[Any, ...]]) -> set[int]:
    device = ahg.get_device(0)
    buffers = [device.malloc(7 * UNIT) for _ in range(2)]
    streams = [device.create_stream(non_blocking=True) for _ in range(STREAMS)]
    streams += [device.null_stream, device.create_stream()]
    events = [device.create_event() for _ in range(EVENTS)]
    with ahg.race_check(on_race="collect") as rc:
        before = rc.statistics().ops  # an outer check (the environment switch) counts on
        for act in program:
            kind = act[0]
            if kind == "op":
                _, s, write, b, start, units = act
                ptr = buffers[b] + start * UNIT
                if write:
                    await streams[s].memset(ptr, 1, units * UNIT)
                else:
                    await streams[s].launch_kernel(read, 1, 1, (units * UNIT // 4, ptr))
            elif kind == "record":
                await streams[act[1]].record_event(events[act[2]])
            elif kind == "wait":
                await streams[act[1]].wait_event(events[act[2]])
            elif kind == "sync":
                await streams[act[1]].synchronize()
            else:
                await device.synchronize()
        await device.synchronize()
    for stream in streams:
        if not stream.is_null:
            stream.destroy()
    for buffer in buffers:
        device.free(buffer)
    for event in events:
        event.destroy()
    # "op #k" counts ops from 1 in the order they were enqueued
    return {int(r.second.op.split()[1][1:]) - 1 - before for r in rc.reports}


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(action, min_size=4, max_size=30))
def test_reported_ops_are_exactly_the_racing_ones(program: list[tuple[Any, ...]]) -> None:
    assert asyncio.run(run(program)) == oracle(program)


def seeded_program(rng: random.Random) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for _ in range(rng.randint(4, 30)):
        roll = rng.random()
        stream = rng.randrange(STREAMS + 2)
        if roll < 0.6:
            write = rng.random() < 0.5
            out.append(("op", stream, write, rng.randrange(2), rng.randrange(4), rng.randint(1, 3)))
        elif roll < 0.75:
            out.append(("record", stream, rng.randrange(EVENTS)))
        elif roll < 0.9:
            out.append(("wait", stream, rng.randrange(EVENTS)))
        elif roll < 0.97:
            out.append(("sync", stream))
        else:
            out.append(("devsync",))
    return out


PROGRAMS = [seeded_program(random.Random(seed)) for seed in range(400)]


def test_seeded_programs_match_the_oracle() -> None:
    racing = 0
    for program in PROGRAMS:
        expected = oracle(program)
        racing += bool(expected)
        assert asyncio.run(run(program)) == expected, program
    assert racing > len(PROGRAMS) // 2  # the programs really exercise races


def test_a_checker_that_ignores_event_waits_fails_the_property(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ahipgraph.tools import race

    monkeypatch.setattr(race._Checker, "event_waited", lambda self, stream, event: None)
    wrong = sum(asyncio.run(run(p)) != oracle(p) for p in PROGRAMS)
    assert wrong > 0
