"""The signal-set pool's counts stay exact when two threads' event loops launch one executable.

A launch takes its signal set before its submission claims the device, so launches of one
executable from two threads' loops may take, make and give back sets at the same moment. The
pool's statistics (sets, misses, acquires, free, in use) must come back to exactly what they
were, or a leak check misfires. Nothing in the pool is counted by a read-modify-write of a
shared field, which another thread could interleave between its read and its write: a set
counts its own borrows while one borrower holds it, and sets made are appended to lists.

The interleaving is made deterministic at every instruction boundary of a take
(``racing_step.step_at_opcode``): the other thread's take runs inside this one's. A stress
test runs the real thing, two threads with a loop each.
"""

from __future__ import annotations

import asyncio
import functools
import itertools

import pytest

import ahipgraph as ahg
from ahipgraph.exec.signal_pool import SignalSet, SignalSetPool
from ahipgraph.testing import fresh_devices, run_together
from racing_step import step_at_opcode

PATHS = {
    # name: (sets prepopulated, sets held before the take, grow when empty)
    "free list": (2, 0, False),
    "not made yet": (2, 1, False),
    "grown": (1, 1, True),
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_no_instruction_of_a_take_can_lose_another_threads_count(path: str) -> None:
    prepopulated, held_before, grow = PATHS[path]
    for index in itertools.count():
        pool = SignalSetPool(1, num_sets=prepopulated, wait_when_empty=not grow)
        held = [pool.acquire_nowait() for _ in range(held_before)]
        with step_at_opcode(pool, "acquire_nowait", index, pool.acquire_nowait) as other:
            mine = pool.acquire_nowait()
        taken = [s for s in [*held, mine, *other] if s is not None]
        stats = pool.statistics()
        assert stats.acquires == len(taken), f"a count was lost at instruction {index}"
        assert stats.in_use == len(taken)
        assert stats.sets == stats.free + stats.in_use
        assert stats.misses == stats.sets - prepopulated
        for signal_set in taken:
            assert isinstance(signal_set, SignalSet)
            pool.release(signal_set)
        stats = pool.statistics()
        assert (stats.free, stats.in_use) == (stats.sets, 0)
        if not other:  # the take ran fewer instructions: every boundary was tried
            break


def test_a_give_back_interleaved_with_a_take_keeps_the_count() -> None:
    """A launch refused on another thread gives its set back inside this thread's take."""
    for index in itertools.count():
        pool = SignalSetPool(1, num_sets=2, wait_when_empty=True)
        refused = pool.acquire_nowait()
        assert refused is not None
        give_back = functools.partial(pool.give_back, refused)
        with step_at_opcode(pool, "acquire_nowait", index, give_back) as ran:
            mine = pool.acquire_nowait()
        assert mine is not None
        expected = 1 if ran else 2  # mine, and the refused one's unless it was given back
        assert pool.statistics().acquires == expected, f"a count was lost at instruction {index}"
        if not ran:
            break


def _launch_from_two_loops(launches: int) -> None:
    """Two threads, a loop each, launching one executable ``launches`` times each."""
    with fresh_devices(1) as (device,):
        graph = ahg.Graph()
        out = device.malloc(8)
        graph.add_memset_node(out, 1, 8)
        graph_exec = graph.instantiate(signal_sets=2)
        streams = [device.create_stream(non_blocking=True) for _ in range(2)]
        before = graph_exec.statistics().signal_pool
        done = [0, 0]

        async def launcher(k: int) -> None:
            while done[k] < launches:
                try:
                    completion = await graph_exec.launch(streams[k])
                except ahg.IllegalState:  # the other thread's loop is using the device
                    await asyncio.sleep(0)
                    continue
                done[k] += 1
                await completion

        errors = run_together(*(functools.partial(asyncio.run, launcher(k)) for k in range(2)))
        assert errors == []
        after = graph_exec.statistics().signal_pool
        assert after.acquires - before.acquires == sum(done) == 2 * launches
        assert (after.sets, after.misses, after.prepopulated) == (
            before.sets,
            before.misses,
            before.prepopulated,
        )
        assert (after.free, after.in_use, after.waiters) == (after.sets, 0, 0)
        assert graph_exec.statistics().in_flight == 0
        for stream in streams:
            stream.destroy()
        graph_exec.destroy()
        graph.destroy()
        device.free(out)


def test_two_loops_launching_one_executable_leave_the_pool_counts_exact() -> None:
    _launch_from_two_loops(200)


@pytest.mark.slow
def test_two_loops_launching_one_executable_many_times_leave_the_pool_counts_exact() -> None:
    _launch_from_two_loops(20_000)
