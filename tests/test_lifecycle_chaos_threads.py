"""Random lifecycles on threads: graphs, executables, user objects and launches, shared.

Four OS threads, each running its own event loop (asyncio or uvloop), share one device and
pick random steps: build a graph owning a user object, instantiate a shared graph, launch a
shared executable on their own stream, destroy or drop an executable, a graph or the program's
user object, await a launch, synchronize, collect forgotten handles. Whatever the interleaving,
every refusal is one of HIP's codes for what the step met, nothing hangs, every destructor runs
exactly once, and once all is destroyed the leak report is empty (DESIGN.md §3, §4 and §5.2).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import threading
import traceback
import warnings
from typing import TypeVar

import pytest

import ahipgraph as ahg
from ahipgraph.testing import leak_report, snapshot
from fakes import run_together

T = TypeVar("T")

# What a step may meet: the device busy on another thread's loop, a destroyed executable or
# graph, a destroyed stream or event, a launch of memory freed by nobody (never, here).
REFUSALS = (ahg.IllegalState, ahg.InvalidValue, ahg.ContextIsDestroyed, ahg.InvalidHandle)


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


class Chaos:
    """The handles the threads share, and what they saw."""

    def __init__(self, device: ahg.Device, seed: int) -> None:
        self.device = device
        self.seed = seed
        self.out = device.malloc(8)
        self.lock = threading.Lock()
        self.execs: list[ahg.GraphExec] = []
        self.graphs: list[ahg.Graph] = []
        self.objects: list[ahg.UserObject] = []
        self.made = 0
        self.destructed: collections.Counter[int] = collections.Counter()
        self.unexpected: list[str] = []

    def _pick(self, handles: list[T], rng: random.Random, take: bool) -> T | None:
        with self.lock:
            if not handles:
                return None
            index = rng.randrange(len(handles))
            return handles.pop(index) if take else handles[index]

    def _build(self) -> None:
        graph = ahg.Graph()
        root = graph.add_kernel_node(add_one, 1, 1, (self.out,))
        graph.add_kernel_node(add_one, 1, 1, (self.out,), deps=[root])
        graph.add_kernel_node(add_one, 1, 1, (self.out,), deps=[root])
        with self.lock:
            self.made += 1
            made = self.made
        obj = ahg.UserObject(lambda number: self.destructed.update([number]), made)
        graph.retain_user_object(obj)
        with self.lock:
            self.graphs.append(graph)
            self.objects.append(obj)

    async def _step(
        self, rng: random.Random, stream: ahg.Stream, handles: list[ahg.Completion]
    ) -> None:
        roll = rng.random()
        if roll < 0.15:
            self._build()
        elif roll < 0.3:
            graph = self._pick(self.graphs, rng, take=False)
            if graph is not None:
                made = graph.instantiate(signal_sets=rng.choice([1, 2, 16]))
                with self.lock:
                    self.execs.append(made)
        elif roll < 0.6:
            graph_exec = self._pick(self.execs, rng, take=False)
            if graph_exec is not None:
                handles.append(await graph_exec.launch(stream))
        elif roll < 0.83:
            which = rng.randrange(3)
            handle: ahg.GraphExec | ahg.Graph | ahg.UserObject | None
            if which == 0:
                handle = self._pick(self.execs, rng, take=True)
            elif which == 1:
                handle = self._pick(self.graphs, rng, take=True)
            else:
                handle = self._pick(self.objects, rng, take=True)
            if handle is not None and (isinstance(handle, ahg.UserObject) or rng.random() < 0.7):
                handle.destroy()
            # else: dropped, for the collector and the releaser
        elif roll < 0.88:
            if handles:
                await handles.pop(0)
        elif roll < 0.92:
            await stream.synchronize()
        elif roll < 0.95:
            ahg.collect_forgotten(timeout=10)
        else:
            await asyncio.sleep(0)  # one turn: let another thread's loop at the device

    async def _run(self, index: int, steps: int) -> None:
        rng = random.Random(self.seed * 100 + index)
        stream = self.device.create_stream()
        handles: list[ahg.Completion] = []
        for _ in range(steps):
            try:
                await self._step(rng, stream, handles)
            except (*REFUSALS, ahg.LaunchFailure):
                pass
            except BaseException as error:  # reported on the test's thread
                self.unexpected.append("".join(traceback.format_exception(error)))
        for handle in handles:
            with contextlib.suppress(*REFUSALS):
                await asyncio.wait_for(handle.wait(), 30)
        await asyncio.wait_for(stream.synchronize(), 30)
        stream.destroy()

    def thread(self, index: int, steps: int, use_uvloop: bool) -> None:
        ahg.run(lambda: self._run(index, steps), use_uvloop=use_uvloop)

    def finish(self) -> None:
        """Destroy what the threads left shared, and let the device's last work complete."""
        for graph_exec in self.execs:
            graph_exec.destroy()
        for graph in self.graphs:
            graph.destroy()
        for obj in self.objects:
            obj.destroy()
        self.execs, self.graphs, self.objects = [], [], []

        async def settle() -> None:
            await self.device.synchronize()

        ahg.run(settle)
        ahg.collect_forgotten()
        self.device.free(self.out)


def chaos(use_uvloop: bool, seed: int, steps: int) -> None:
    device = ahg.get_device(0)
    baseline = snapshot()
    run = Chaos(device, seed)
    with warnings.catch_warnings(), ahg.race_check(on_race="collect"):
        # Every kernel adds to one shared cell from four threads' streams: those races are
        # real and beside the point here (under ``make race`` they would fail the threads).
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)  # dropped on purpose
        errors = run_together(*[lambda i=i: run.thread(i, steps, use_uvloop) for i in range(4)])
        run.finish()
    assert errors == []
    assert run.unexpected == []
    assert run.made > 0
    assert run.destructed == collections.Counter(range(1, run.made + 1))  # each exactly once
    assert leak_report(baseline) is None


@pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_random_lifecycles_on_four_loops_in_threads(use_uvloop: bool) -> None:
    chaos(use_uvloop, seed=1, steps=60)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 22))
@pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_random_lifecycles_on_four_loops_in_threads_soak(use_uvloop: bool, seed: int) -> None:
    chaos(use_uvloop, seed=seed, steps=300)
