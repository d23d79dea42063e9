"""RefCounted: batch retain/release, the last-release hook runs exactly once."""

from __future__ import annotations

import threading
import time

import pytest

from ahipgraph.core.refcount import RefCounted
from fakes import run_together


class Counted(RefCounted):
    __slots__ = ("hook_calls", "hook_threads")

    def __init__(self, initial: int = 1) -> None:
        super().__init__(initial)
        self.hook_calls = 0
        self.hook_threads: list[int] = []

    def _last_release(self) -> None:
        self.hook_calls += 1
        self.hook_threads.append(threading.get_ident())


class SlowCounted(Counted):
    """A fake that gives up the GIL on every read and write of the count.

    ``time.sleep(0)`` waits for nothing; it only lets another thread run in the middle of a
    read-modify-write, which opens the race window the lock must close.
    """

    __slots__ = ("_stored_count",)

    @property  # type: ignore[override]
    def _refcount(self) -> int:
        time.sleep(0)
        return self._stored_count

    @_refcount.setter
    def _refcount(self, value: int) -> None:
        time.sleep(0)
        self._stored_count = value


def test_starts_with_the_initial_count() -> None:
    assert Counted().refcount == 1
    assert Counted(5).refcount == 5


@pytest.mark.parametrize("initial", [0, -3])
def test_initial_count_must_be_positive(initial: int) -> None:
    with pytest.raises(ValueError, match="initial"):
        Counted(initial)


def test_batch_retain_and_release_move_the_count_by_n() -> None:
    obj = Counted(2)
    obj.retain(5)
    assert obj.refcount == 7
    assert obj.release(4) is False
    assert obj.refcount == 3
    assert obj.hook_calls == 0
    assert obj.release(3) is True
    assert obj.refcount == 0
    assert obj.hook_calls == 1


@pytest.mark.parametrize("count", [0, -1])
def test_counts_must_be_positive(count: int) -> None:
    obj = Counted(3)
    with pytest.raises(ValueError, match="count"):
        obj.retain(count)
    with pytest.raises(ValueError, match="count"):
        obj.release(count)
    assert obj.refcount == 3


def test_releasing_more_than_held_is_refused_and_changes_nothing() -> None:
    obj = Counted(2)
    with pytest.raises(ValueError, match="cannot release 3 of 2"):
        obj.release(3)
    assert obj.refcount == 2
    assert obj.hook_calls == 0


def test_dead_object_cannot_be_retained_or_released() -> None:
    obj = Counted()
    obj.release()
    with pytest.raises(ValueError, match="dead"):
        obj.retain()
    with pytest.raises(ValueError, match="cannot release"):
        obj.release()
    assert obj.hook_calls == 1


def test_last_release_hook_runs_exactly_once_when_threads_race_to_release(
    fast_switching: None,
) -> None:
    for _ in range(10):
        obj = SlowCounted(8 * 10)
        last_flags: list[bool] = []

        def release_ten(obj: Counted = obj, flags: list[bool] = last_flags) -> None:
            flags.extend(obj.release() for _ in range(10))

        assert run_together(*[release_ten] * 8) == []
        assert obj.refcount == 0
        assert obj.hook_calls == 1
        assert last_flags.count(True) == 1


def test_concurrent_batch_retain_release_pairs_leave_the_count_unchanged(
    fast_switching: None,
) -> None:
    obj = SlowCounted(1)

    def churn(batch: int) -> None:
        for _ in range(100):
            obj.retain(batch)
            obj.release(batch)

    assert run_together(*[lambda n=n: churn(n) for n in range(1, 7)]) == []
    assert obj.refcount == 1
    assert obj.hook_calls == 0


def test_hook_runs_on_the_thread_that_dropped_the_last_reference() -> None:
    obj = Counted(2)
    obj.release()
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(obj.release()))
    thread.start()
    thread.join()
    assert result == [True]
    assert obj.hook_threads == [thread.ident]
