"""Attacks on statistics(), reprs and the pools and registries behind them.

Each test is named after what it pins down; each failed before its fix.
"""

from __future__ import annotations

import gc
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.core.registry import HandleRegistry
from ahipgraph.device.thread_ids import ThreadIdsCache
from ahipgraph.exec.arena import KernelArgArena
from ahipgraph.graph.node_registry import NodeRegistry

_DEADLOCK_GUARD = 30.0  # seconds: only ever reached when the call below deadlocked


def _in_thread(body: Callable[[], None]) -> None:
    """Run ``body`` on a daemon thread; fail (rather than hang the suite) if it deadlocks."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as error:  # reported to the test below
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(_DEADLOCK_GUARD)
    assert not thread.is_alive(), "deadlocked: a finalizer read statistics under the lock"
    assert errors == []


class _CollectingList(list[Any]):
    """A registry column that starts a collection when read or grown under the registry's
    lock, as any allocation there may: the awkward timing, made on purpose."""

    def __iter__(self) -> Iterator[Any]:
        gc.collect()
        return super().__iter__()

    def extend(self, items: Iterable[Any]) -> None:
        gc.collect()
        super().extend(items)


class _Handle:
    """Something registered; collected only by the collector (it is in a cycle)."""

    def __init__(self, registry: HandleRegistry[_Handle], seen: list[Any]) -> None:
        self.registry = registry
        self.seen = seen
        self.cycle = self
        registry.register(self)

    def __del__(self) -> None:  # user code: reads the registry it is (was) in
        self.seen.append(self.registry.statistics())
        self.seen.append(repr(self.registry))
        self.seen.append(len(self.registry))


def test_finalizer_reading_a_handle_registry_while_its_lock_is_held() -> None:
    # A collection can start at any allocation, including one a registry makes with its lock
    # held (live_objects builds a list there). The collected handle's weak reference is now
    # dead, so statistics()/repr()/len() from a finalizer that collection runs would retire
    # it under the lock: they must not wait for a lock their own thread holds.
    registry: HandleRegistry[_Handle] = HandleRegistry("attack")
    seen: list[Any] = []
    survivor = _Handle(registry, seen)
    survivor.cycle = None  # type: ignore[assignment]  # freed by reference counting, later

    def body() -> None:
        was_enabled = gc.isenabled()
        gc.disable()  # only the collection forced below frees the cycle
        try:
            _Handle(registry, seen)
            registry._refs = _CollectingList(registry._refs)
            assert registry.live_objects() == [survivor]
        finally:
            if was_enabled:
                gc.enable()

    _in_thread(body)
    assert len(seen) == 3
    assert seen[0].live == 1
    assert seen[0].registered_total == 2
    assert seen[1] == "<HandleRegistry attack live=1 slots=2>"
    assert seen[2] == 1


class _Graph:
    """Stands for a graph: the node registry holds it weakly and reads one field."""

    def __init__(self) -> None:
        self._node_registry_ref: Any = None


class _ReadsNodeRegistryWhenCollected:
    def __init__(self, registry: NodeRegistry, seen: list[Any]) -> None:
        self.registry = registry
        self.seen = seen
        self.cycle = self

    def __del__(self) -> None:  # user code: reads the node registry's statistics and repr
        self.seen.append(self.registry.statistics())
        self.seen.append(repr(self.registry))


def test_finalizer_reading_the_node_registry_while_it_grows() -> None:
    # A graph's first node grows the node registry's columns under its lock; a collection
    # starting there runs finalizers, which may read the registry's statistics (which always
    # take the lock: they leave the graphs' spare slots out).
    registry = NodeRegistry("attack node")
    registry._owners = _CollectingList()
    seen: list[Any] = []
    graph = _Graph()

    def body() -> None:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            _ReadsNodeRegistryWhenCollected(registry, seen)
            registry.take_spare(graph)
        finally:
            if was_enabled:
                gc.enable()

    _in_thread(body)
    assert len(seen) == 2
    assert seen[0].live == 0
    assert seen[1].startswith("<HandleRegistry attack node live=0 slots=")


@pytest.fixture(autouse=True)
def _collected() -> Iterator[None]:
    yield
    gc.collect()


class _ReadsArenaWhenCollected:
    def __init__(self, arena: KernelArgArena, seen: list[Any]) -> None:
        self.arena = arena
        self.seen = seen
        self.cycle = self

    def __del__(self) -> None:  # user code: what exec.statistics() reads of its arena
        self.seen.append(self.arena.statistics())
        self.seen.append(repr(self.arena))


def test_finalizer_reading_arena_statistics_while_it_adds_a_chunk() -> None:
    # An update that needs a new chunk allocates device memory under the arena's lock; a
    # collection starting there may run a finalizer that reads exec.statistics() (its arena's
    # statistics()) on the same thread.
    arena = KernelArgArena(ahg.get_device(0), 64)
    seen: list[Any] = []
    new_chunk = arena._new_chunk

    def collecting_new_chunk() -> Any:
        gc.collect()
        return new_chunk()

    arena._new_chunk = collecting_new_chunk  # type: ignore[method-assign]

    def body() -> None:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            _ReadsArenaWhenCollected(arena, seen)
            assert len(arena.allocate_all([16, 16])) == 2
        finally:
            if was_enabled:
                gc.enable()

    _in_thread(body)  # before it returns, the arena's lock may be held for ever: no close
    arena.close()
    assert len(seen) == 2
    assert seen[0].live_slots == 0
    assert seen[0].chunks == 0
    assert seen[1].startswith("<KernelArgArena device=0 chunks=0 live=0")


class _CollectingArrays(OrderedDict[int, Any]):
    """The cache's arrays, starting a collection when listed under its lock."""

    def __iter__(self) -> Iterator[int]:
        gc.collect()
        return super().__iter__()


class _ReadsThreadIdsWhenCollected:
    def __init__(self, cache: ThreadIdsCache, seen: list[Any]) -> None:
        self.cache = cache
        self.seen = seen
        self.cycle = self

    def __del__(self) -> None:  # user code: what thread_ids_statistics() reads
        self.seen.append(self.cache.statistics())
        self.seen.append(repr(self.cache))


def test_finalizer_reading_thread_ids_statistics_while_they_are_read() -> None:
    # statistics() builds its record under the cache's lock: a collection starting there may
    # run a finalizer that reads thread_ids_statistics() on the same thread.
    cache = ThreadIdsCache()
    cache.ids(4)
    cache._arrays = _CollectingArrays(cache._arrays)
    seen: list[Any] = []
    outer: list[Any] = []

    def body() -> None:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            _ReadsThreadIdsWhenCollected(cache, seen)
            outer.append(cache.statistics())
        finally:
            if was_enabled:
                gc.enable()

    _in_thread(body)
    assert len(seen) == 2
    assert seen[0] == outer[0]
    assert seen[0].counts == (4,)
    assert seen[1] == "<ThreadIdsCache entries=1/16 bytes=32/67108864>"
