"""Fakes that make awkward timings on purpose (STYLE.md, habit 12).

* :class:`HeldKernel` hangs until the test releases it, so its queue is held open exactly as long
  as the test wants, and ``started`` tells the test when the queue is held.
* :class:`GatedHost` is an async host function whose k-th run waits until the test opens gate k.
* :func:`run_together` runs callables on threads released at the same instant.
* :func:`loop_turns` gives the event loop a few iterations. It is only used to show that blocked
  work *stays* blocked; whenever a test needs work to finish it awaits a completion or a
  synchronize instead.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import ahipgraph as ahg


class HeldKernel:
    """A kernel whose body waits on an :class:`asyncio.Event` the test sets."""

    def __init__(self, name: str = "held", log: list[str] | None = None) -> None:
        self.name = name
        self.started = asyncio.Event()
        self.runs = 0
        self._gate = asyncio.Event()

        async def body(t: ahg.Threads) -> None:
            self.runs += 1
            if log is not None:
                log.append(f"{name} start")
            self.started.set()
            await self._gate.wait()
            if log is not None:
                log.append(f"{name} end")

        self.kernel = ahg.Kernel(body, name=name)

    async def launch(self, stream: ahg.Stream) -> ahg.Completion:
        """Enqueue the kernel (it starts when its stream reaches it)."""
        return await stream.launch_kernel(self.kernel, 1, 1)

    def release(self) -> None:
        self._gate.set()


async def loop_turns(turns: int = 4) -> None:
    """Let the loop run ``turns`` times.

    Device work moves one hop per turn: a queue's run is a ``call_soon`` callback, an async
    kernel or host body is a task started by that run, and a finished packet wakes the queues
    waiting on it with another ``call_soon``. Four turns are more hops than any unblocked
    operation in these tests needs, so work still pending afterwards is blocked, not slow.
    """
    for _ in range(turns):
        await asyncio.sleep(0)  # one loop iteration: every ready callback and task step runs


def run_together(*targets: Callable[[], object]) -> list[BaseException]:
    """Run each target on its own thread, all released at once; return what they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(targets))

    def body(target: Callable[[], object]) -> None:
        start.wait()
        try:
            target()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


class GatedHost:
    """An async host function that, on its k-th run, waits until the test opens gate k."""

    def __init__(self, name: str = "gate", log: list[str] | None = None) -> None:
        self.name = name
        self.log = log
        self.runs = 0
        self._gates: dict[int, asyncio.Event] = {}
        self._started: dict[int, asyncio.Event] = {}

    @staticmethod
    def _event(table: dict[int, asyncio.Event], run: int) -> asyncio.Event:
        return table.setdefault(run, asyncio.Event())

    async def __call__(self) -> None:
        run = self.runs
        self.runs += 1
        if self.log is not None:
            self.log.append(f"{self.name} start {run}")
        self._event(self._started, run).set()
        await self._event(self._gates, run).wait()
        if self.log is not None:
            self.log.append(f"{self.name} end {run}")

    def open(self, run: int = 0) -> None:
        self._event(self._gates, run).set()

    def open_all(self, runs: int) -> None:
        for run in range(runs):
            self.open(run)

    async def started(self, run: int = 0) -> None:
        await self._event(self._started, run).wait()
