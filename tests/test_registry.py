"""HandleRegistry: generations defeat ABA, counts stay exact under threads."""

from __future__ import annotations

import time
from typing import Any, SupportsIndex

import pytest

import ahipgraph as ahg
from ahipgraph.core.registry import HandleId, HandleRegistry
from ahipgraph.runtime.event import EVENTS
from ahipgraph.runtime.stream import STREAMS
from fakes import run_together


class Thing:
    def __init__(self, name: str) -> None:
        self.name = name


class YieldingList(list[Any]):
    """A fake slot/free list that gives up the GIL on every access.

    ``time.sleep(0)`` waits for nothing; it lets another thread run between a registry's check
    and its update, which opens the race windows its lock must close.
    """

    def __getitem__(self, index: Any) -> Any:
        time.sleep(0)
        return super().__getitem__(index)

    def __setitem__(self, index: Any, value: Any) -> None:
        time.sleep(0)
        super().__setitem__(index, value)

    def append(self, value: Any) -> None:
        time.sleep(0)
        super().append(value)

    def pop(self, index: SupportsIndex = -1) -> Any:
        time.sleep(0)
        return super().pop(index)


def slow_registry() -> HandleRegistry[Thing]:
    registry: HandleRegistry[Thing] = HandleRegistry("thing")
    registry._generations = YieldingList()
    registry._refs = YieldingList()
    registry._free = YieldingList()
    return registry


def test_register_then_get_returns_the_object() -> None:
    registry: HandleRegistry[Thing] = HandleRegistry("thing")
    a, b = Thing("a"), Thing("b")
    ha, hb = registry.register(a), registry.register(b)
    assert ha != hb
    assert registry.get(ha) is a
    assert registry.get(hb) is b
    assert registry.is_valid(ha)
    assert len(registry) == 2
    assert registry.live_objects() == [a, b]


def test_unregister_succeeds_exactly_once() -> None:
    registry: HandleRegistry[Thing] = HandleRegistry("thing")
    thing = Thing("a")
    hid = registry.register(thing)
    assert registry.unregister(hid) is thing
    assert registry.unregister(hid) is None
    assert registry.get(hid) is None
    assert not registry.is_valid(hid)
    assert len(registry) == 0


def test_destroyed_handle_never_validates_again_after_slot_reuse() -> None:
    registry: HandleRegistry[Thing] = HandleRegistry("thing")
    old_thing = Thing("old")  # the registry holds objects weakly: the test keeps them
    old = registry.register(old_thing)
    registry.unregister(old)
    new_thing = Thing("new")
    new = registry.register(new_thing)
    # The slot is recycled, but the generation moved on: the ABA case.
    assert new.slot == old.slot
    assert new.generation == old.generation + 1
    assert registry.get(old) is None
    assert registry.unregister(old) is None  # a stale destroy cannot kill the new object
    assert registry.get(new) is new_thing


def test_many_reuses_of_one_slot_keep_every_old_handle_dead() -> None:
    registry: HandleRegistry[Thing] = HandleRegistry("thing")
    stale = []
    for i in range(50):
        thing = Thing(str(i))
        hid = registry.register(thing)
        stale.append(hid)
        registry.unregister(hid)
    assert {hid.slot for hid in stale} == {0}
    assert len({hid.generation for hid in stale}) == 50
    assert not any(registry.is_valid(hid) for hid in stale)
    assert registry.statistics().slots == 1


class ActsOnFirstRead(list[Any]):
    """A generation list that runs ``action`` once, right after ``get`` first reads a slot."""

    def __init__(self, items: list[Any], action: Any) -> None:
        super().__init__(items)
        self.action = action

    def __getitem__(self, index: Any) -> Any:
        value = super().__getitem__(index)
        action, self.action = self.action, None
        if action is not None:
            action()
        return value


def test_get_racing_a_destroy_and_a_reuse_of_the_slot_never_returns_the_new_object() -> None:
    registry: HandleRegistry[Thing] = HandleRegistry("thing")
    old, new = Thing("old"), Thing("new")
    hid = registry.register(old)
    reused: list[HandleId] = []

    def destroy_and_reuse() -> None:  # what another thread does between get's two reads
        assert registry.unregister(hid) is old
        reused.append(registry.register(new))

    registry._generations = ActsOnFirstRead(registry._generations, destroy_and_reuse)
    assert registry.get(hid) is None
    assert reused[0].slot == hid.slot  # the slot was reused under a new generation
    assert registry.get(reused[0]) is new


@pytest.mark.parametrize("hid", [HandleId(5, 0), HandleId(-1, 0), HandleId(0, 7)])
def test_handles_never_issued_are_rejected(hid: HandleId) -> None:
    registry: HandleRegistry[Thing] = HandleRegistry("thing")
    live = Thing("live")
    registry.register(live)  # slot 0, generation 0
    assert registry.get(hid) is None
    assert registry.unregister(hid) is None
    assert registry.live_objects() == [live]


def test_statistics_and_repr() -> None:
    registry: HandleRegistry[Thing] = HandleRegistry("thing")
    things = [Thing(str(i)) for i in range(3)]  # the registry holds them weakly
    hids = [registry.register(thing) for thing in things]
    registry.unregister(hids[1])
    stats = registry.statistics()
    assert (stats.kind, stats.live, stats.slots, stats.registered_total) == ("thing", 2, 3, 3)
    assert repr(registry) == "<HandleRegistry thing live=2 slots=3>"


def test_many_threads_registering_and_unregistering_keep_counts_exact(
    fast_switching: None,
) -> None:
    registry = slow_registry()
    threads_n, rounds, keep = 8, 120, 20
    kept: list[list[HandleId]] = [[] for _ in range(threads_n)]
    alive: list[Thing] = []  # the registry holds objects weakly: the test keeps them

    def worker(index: int) -> None:
        for i in range(rounds):
            thing = Thing(f"{index}-{i}")
            hid = registry.register(thing)
            assert registry.get(hid) is thing
            if i < keep:
                kept[index].append(hid)
                alive.append(thing)
            else:
                assert registry.unregister(hid) is thing

    assert run_together(*[lambda i=i: worker(i) for i in range(threads_n)]) == []
    live = [hid for hids in kept for hid in hids]
    assert len(registry) == threads_n * keep
    assert len(set(live)) == len(live)  # no two live objects share a handle
    assert all(registry.is_valid(hid) for hid in live)
    stats = registry.statistics()
    assert stats.registered_total == threads_n * rounds
    assert stats.live == threads_n * keep
    assert len(registry.live_objects()) == threads_n * keep


def test_racing_destroys_of_one_handle_succeed_exactly_once(fast_switching: None) -> None:
    registry = slow_registry()
    for _ in range(100):
        thing = Thing("x")
        hid = registry.register(thing)
        wins: list[bool] = []

        def destroy(hid: HandleId = hid, wins: list[bool] = wins) -> None:
            wins.append(registry.unregister(hid) is not None)

        assert run_together(*[destroy] * 4) == []
        assert wins.count(True) == 1
    assert len(registry) == 0
    assert registry.statistics().slots == 1


def test_streams_and_events_are_registered_while_alive(device: ahg.Device) -> None:
    streams_before, events_before = len(STREAMS), len(EVENTS)
    stream, event = device.create_stream(), device.create_event()
    assert STREAMS.get(stream.hid) is stream
    assert EVENTS.get(event.hid) is event
    assert (len(STREAMS), len(EVENTS)) == (streams_before + 1, events_before + 1)
    stream.destroy()
    event.destroy()
    assert not STREAMS.is_valid(stream.hid)
    assert not EVENTS.is_valid(event.hid)
    assert (len(STREAMS), len(EVENTS)) == (streams_before, events_before)
