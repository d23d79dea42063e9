"""Per-task default streams (HIP's ``hipStreamPerThread``), one per task and device.

HIP gives every host thread its own default stream on each device; here every asyncio task
(or OS thread, outside a task) has one. It is a blocking stream: it orders with the device's
legacy null stream, and not with other tasks' streams, as HIP's per-thread stream does.

``ahg.STREAM_PER_THREAD`` stands for it wherever a call takes an optional stream (a graph
launch, an upload), as ``hipStreamPerThread`` does in HIP; ``device.per_thread_stream()``
returns the stream itself. A task's streams are destroyed when the task finishes (work already
enqueued still completes); a thread's live as long as their device is configured.

When a finished task's streams go: a done callback destroys them, but asyncio runs a task's
done callbacks in the order they were added, and whoever awaits the task added its own (the one
that resumes ``await task``) first, usually before the task even ran, so before the task's
first use of a per-task stream added this module's. Right after ``await task`` the streams were
still open, and ``statistics()`` and leak reports counted them until the loop's next turn.
The callback cannot be put first (asyncio has no such API), so readers settle instead: every
read of these counts (:func:`per_thread_statistics`, ``Device.statistics()``, the testing
kit's snapshots) first destroys the streams of tasks already done (:func:`settle_finished`).
A task is done as soon as its coroutine has returned, before any awaiter resumes.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .device import Device
    from .stream import Stream

__all__ = ["STREAM_PER_THREAD", "per_thread_stream", "per_thread_statistics"]


class PerThreadStream:
    """The ``hipStreamPerThread`` handle: a sentinel, resolved against a device when used.

    Its one instance is ``ahg.STREAM_PER_THREAD``; the class names its type for the calls
    that accept it in place of a stream (a graph launch or upload, an event record).
    """

    __slots__ = ()

    # One instance, as ``None`` is one: the calls that take it recognise it by identity, so a
    # second one (a copy, an unpickled one, ``PerThreadStream()``) was refused as "not a
    # Stream or None" while its repr said it was ``ahg.STREAM_PER_THREAD``.

    def __new__(cls) -> PerThreadStream:
        return STREAM_PER_THREAD

    def __copy__(self) -> PerThreadStream:
        return self

    def __deepcopy__(self, memo: object) -> PerThreadStream:
        return self

    def __reduce__(self) -> str:
        return "STREAM_PER_THREAD"  # unpickled as this module's global: the one instance

    def __repr__(self) -> str:
        return "ahg.STREAM_PER_THREAD"


STREAM_PER_THREAD: Final[PerThreadStream] = object.__new__(PerThreadStream)

# Re-entrant: the collector may run anywhere under it (a weak reference or a dict made), and a
# ``__del__`` or ``gc.callbacks`` hook it runs on this thread may ask for its task's stream
# (``per_thread_stream``) or read statistics; a plain lock waited there for this very thread
# for ever. Each critical section is one step a nested call cannot see half-done: the table is
# read or changed by single dict operations, and a stream is made outside it (making one runs
# the collector too), then put in unless a nested call put one in first.
_lock = threading.RLock()
_by_task: weakref.WeakKeyDictionary[asyncio.Task[Any], dict[Device, Stream]] = (
    weakref.WeakKeyDictionary()
)
_by_thread = threading.local()
# ``walking`` is True while this thread walks the table under ``_lock``. A settle of finished
# tasks nested there (user code the collector ran reads ``Device.statistics()``) skips: it
# would change the table under the walk (the done callbacks still clean up).
_holding = threading.local()


def _task_finished(task: asyncio.Task[Any]) -> None:
    with _lock:
        streams = _by_task.pop(task, {})
    _destroy(streams.values())


def _destroy(streams: Iterable[Stream]) -> None:
    for stream in streams:
        if stream._state.value == "open":
            stream.destroy()


def settle_finished() -> None:
    """Destroy the per-task streams of tasks that are done but whose done callback has not run
    yet (see the module note): what a statistics read calls first. Costs a dict check when no
    task holds a per-task stream. Safe from any thread: each task's streams are taken from the
    table under the lock, by this or by the done callback, never both. Called by user code
    the collector ran while this thread is walking the table (see ``_holding``), it does
    nothing."""
    if not _by_task or getattr(_holding, "walking", False):
        return
    with _lock:
        _holding.walking = True
        try:
            done = [task for task in _by_task if task.done()]
        finally:
            _holding.walking = False
        streams = [stream for task in done for stream in _by_task.pop(task, {}).values()]
    _destroy(streams)


def per_thread_stream(device: Device) -> Stream:
    """The calling task's (or thread's) own default stream on ``device``, made on first use.

    The stream is made outside the table's lock and put in only if the table still has no open
    stream for the device: making it may run the collector, and user code there (a
    ``__del__``) may ask for the same stream first. That one is the task's, and the one made
    here is destroyed unused.
    """
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop in this thread
        task = None
    if task is None:
        table: dict[Device, Stream] | None = getattr(_by_thread, "streams", None)
        if table is None:
            table = _by_thread.__dict__.setdefault("streams", {})
    else:
        with _lock:
            table = _by_task.get(task)
    stream = None if table is None else table.get(device)
    if stream is not None and stream._state.value == "open":
        return stream
    made = _new_stream(device)
    fresh = False
    if task is None:
        assert table is not None
        stream = _put(table, device, made)
    else:
        with _lock:
            table = _by_task.get(task)
            if table is None:
                table = _by_task.setdefault(task, {})  # a nested call may have made it
                fresh = not table
            stream = _put(table, device, made)
    if stream is not made:
        made.destroy()  # a nested call put its stream in first
    if fresh:
        task.add_done_callback(_task_finished)  # type: ignore[union-attr]
    return stream


def _new_stream(device: Device) -> Stream:
    from .stream import Stream

    stream = Stream._create(device, owned=True)
    stream._implicit = True  # the device owns it: retired when the device is replaced
    return stream


def _put(table: dict[Device, Stream], device: Device, made: Stream) -> Stream:
    """``table``'s open stream for ``device``, ``made`` if it has none (one dict step each)."""
    stream = table.setdefault(device, made)
    if stream is not made and stream._state.value != "open":
        table[device] = stream = made
    return stream


def per_thread_statistics() -> dict[str, int]:
    """Tasks holding per-task streams, and those streams (finished tasks' settled first)."""
    settle_finished()
    with _lock:
        _holding.walking = True
        try:
            tables = list(_by_task.values())
        finally:
            _holding.walking = False
    return {"tasks": len(tables), "streams": sum(len(t) for t in tables)}
