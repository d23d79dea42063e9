"""User objects: a destructor that runs when the last graph, exec or user lets go.

A :class:`UserObject` (``hipUserObjectCreate``) couples a destructor and its data to a reference
count shared by the user and by *owners*: graphs, executables and their launches. An owner's
references are counted per owner, so destroying a graph releases exactly what that graph holds,
and the object knows which owners still hold it.

Design:
  * One code path for owners. ``adopt(owner, count)`` adds references on an owner's behalf (or,
    with ``move=True``, takes over references the caller already holds); ``disown(owner)`` gives
    back what the owner holds. Graph retain/release/clone/destroy and executables all use them.
  * One lock per object guards the count and the owner table together, so an adopt can never
    race a last release: a dead object stays dead, and adopting it is a no-op (HIP treats an
    unknown user object as a silent success).
  * The destructor runs exactly once, on the thread of the call that dropped the count to zero,
    *outside* the lock, with ``data`` as its only argument. If it raises, the exception reaches
    that caller; the object is dead either way.

HIP behaviour kept on purpose: counts are 1..INT_MAX (else InvalidValue), and so is the total a
user's retains may reach (HIP's C ``int`` would wrap past it); releasing more than
the current count is a silent no-op and the object survives; a plain ``release`` may drop
references an owner thinks it holds (HIP lets it), and an owner's later ``disown`` then gives
back only what is left. HIP bug not kept: a graph releasing more than it owns lets its owned
count go negative; here that release is a no-op.

Invariants (asserted): ``0 <= refcount``; once zero it never changes again; the owner table is
empty when the object is dead; the registry holds exactly the live objects.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.callables import makes_generator
from ..core.errors import InvalidValue
from ..core.ints import as_int
from ..core.lifecycle import (
    DestroyOnExit,
    HandleRecord,
    HandleState,
    owner_key,
    owner_of,
    safe_repr,
)
from ..core.refcount import RefCounted
from ..core.registry import HandleId, HandleRegistry

__all__ = [
    "INT_MAX",
    "USER_OBJECTS",
    "UserObject",
    "UserObjectStatistics",
    "check_count",
    "disown_all",
]

INT_MAX = 2**31 - 1
"""The largest count HIP accepts for a retain, a release or an initial reference count."""

USER_OBJECTS: HandleRegistry[UserObject] = HandleRegistry("user object")


def _check_total(total: int, what: str) -> None:
    """HIP keeps a user object's count in a C ``int``: a retain taking it past INT_MAX would
    wrap it negative there (and free the object under its users). Refused here, nothing changed.
    """
    if total > INT_MAX:
        raise InvalidValue(f"a user object cannot hold more than {INT_MAX} {what}")


def check_count(count: int, what: str = "count") -> int:
    """Validate a retain/release count as HIP does (1..INT_MAX).

    Raises:
        TypeError: ``count`` is not an int. InvalidValue: it is outside 1..INT_MAX.
    """
    count = as_int(count, what)
    if not 1 <= count <= INT_MAX:
        raise InvalidValue(f"{what} must be in 1..{INT_MAX}, got {count}")
    return count


@dataclass(frozen=True, slots=True)
class UserObjectStatistics:
    refcount: int
    owners: int
    owned: int
    alive: bool


class _UserObjectRecord(HandleRecord):
    """The destructor and its data: a forgotten user object (one the user dropped while
    holding references, and no graph or executable owns) runs its destructor on the releaser
    thread, with a warning, instead of never."""

    __slots__ = ("_held",)

    releases = True
    advice = (
        "destroy it, use it in a `with` block, or release() the references it was created or "
        "retained with"
    )

    def __init__(self, obj: UserObject, destructor: Callable[[Any], object], data: Any) -> None:
        super().__init__(obj, f"user object #{obj.hid.slot}.{obj.hid.generation}")
        # The destructor and its data, as the one item of a list: ``take`` pops it, one step
        # for every thread (see there).
        self._held: list[tuple[Callable[[Any], object], Any]] = [(destructor, data)]

    @property
    def data(self) -> Any:
        """The destructor's argument, or None once the destructor was taken."""
        for _, data in self._held:  # the list's own iterator: never fails if emptied meanwhile
            return data
        return None

    def take(self) -> tuple[Callable[[Any], object] | None, Any]:
        """The destructor and its data, once (neither is kept alive after).

        The releaser thread (a forgotten object) and a last release on another thread (the
        ``__del__`` of an object in the same garbage cycle) may take it at the same moment:
        ``list.pop`` is atomic, so exactly one of them gets it and the other finds nothing.
        """
        try:
            return self._held.pop()
        except IndexError:
            return None, None

    def release(self) -> None:
        destructor, data = self.take()
        if destructor is not None:
            destructor(data)


class UserObject(RefCounted, DestroyOnExit):
    """A destructor and its data, kept alive by the user and by the graphs that own it.

    Like every handle it ends with ``destroy()`` or a ``with`` block, which release the
    references the program holds (those not owned by a graph or an executable); ``release``
    drops a given count, as ``hipUserObjectRelease``.

    Args:
        destructor: called once, as ``destructor(data)``, when the last reference goes.
        data: passed to the destructor (may be None, as HIP allows a null pointer). Held
            until the destructor runs: data that refers to a graph or executable owning
            this object keeps both alive until that graph is destroyed (refer to it weakly
            to let a forgotten graph go).
        initial_refcount: references the caller starts with (1..INT_MAX).

    Raises:
        InvalidValue: ``destructor`` is None, or ``initial_refcount`` is out of range.
        TypeError: ``destructor`` is not callable, is a coroutine function (it runs
            synchronously, so a coroutine would never be awaited) or a generator function
            (whose body would never run), or the count is not an int.
    """

    __slots__ = ("__weakref__", "_hid", "_life", "_owned")

    def __init__(
        self,
        destructor: Callable[[Any], object],
        data: Any = None,
        initial_refcount: int = 1,
    ) -> None:
        if destructor is None:
            raise InvalidValue("a user object needs a destructor")
        if not callable(destructor):
            raise TypeError(f"destructor must be callable, got {destructor!r}")
        if inspect.iscoroutinefunction(destructor) or inspect.iscoroutinefunction(
            type(destructor).__call__
        ):
            # It runs synchronously wherever the last reference goes (a release, a destroy, a
            # launch's completion, the releaser thread): a coroutine would never be awaited,
            # so the destructor would silently not run.
            raise TypeError(
                f"destructor must be a plain function, not a coroutine function: {destructor!r}"
            )
        if makes_generator(destructor):  # its body would never run either
            raise TypeError(
                f"destructor must be a plain function, not a generator function: {destructor!r}"
            )
        super().__init__(check_count(initial_refcount, "initial_refcount"))
        # Re-entrant: a few critical sections allocate (the owners' sum, a snapshot), so the
        # collector may run inside one, and a ``__del__`` it calls may release this very
        # object on this thread (a wrapper giving back its reference when collected). Each
        # reads the state it acts on after its allocations, so a nested release is seen.
        self._ref_lock = threading.RLock()
        # Keyed by ``owner_key(owner)``: a graph or executable owns through its record, so this
        # table never keeps a forgotten owner alive.
        self._owned: dict[object, int] = {}
        self._hid = USER_OBJECTS.register(self)
        self._life = _UserObjectRecord(self, destructor, data)

    @property
    def hid(self) -> HandleId:
        """The object's registry handle (read-only: its last release retires exactly this one)."""
        return self._hid

    @property
    def state(self) -> HandleState:
        return HandleState.OPEN if self._refcount > 0 else HandleState.DESTROYED

    # -- the user's references ---------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """False once the destructor has been started."""
        return self._refcount > 0

    @property
    def data(self) -> Any:
        """The destructor's argument (None once the destructor has run: it is not kept alive)."""
        return self._life.data

    def retain(self, count: int = 1) -> None:
        """Add ``count`` references (``hipUserObjectRetain``); a dead object is left alone.

        Raises:
            InvalidValue: ``count`` is outside 1..INT_MAX, or the count would pass INT_MAX.
        """
        count = check_count(count)
        with self._ref_lock:
            if self._refcount:
                _check_total(self._refcount + count, "references")
                self._refcount += count

    def release(self, count: int = 1) -> bool:
        """Drop ``count`` references (``hipUserObjectRelease``).

        Releasing more than the current count does nothing, as in HIP. Dropping the last
        reference runs the destructor on this thread before returning.

        Returns:
            True if this call ran the destructor.

        Raises:
            InvalidValue: ``count`` is outside 1..INT_MAX.
        """
        count = check_count(count)
        with self._ref_lock:
            if not self._refcount or count > self._refcount:
                return False
            last = self._drop_locked(count)
        if last:
            self._last_release()
        return last

    def destroy(self) -> None:
        """Release every reference the program holds: the count less what owners hold.

        The handle's ending, as for every handle (``with`` calls it): the program is done with
        the object. Graphs and executables that own references keep it alive, and the last of
        them to let go runs the destructor; with no owner left, this runs it, on this thread,
        before returning. Calling it again, or on an object whose destructor already ran, does
        nothing (no reference is the program's any more).
        """
        with self._ref_lock:
            owned = sum(self._owned.values())  # first: see the lock's note in __init__
            mine = self._refcount - owned
            if mine <= 0:
                return
            last = self._drop_locked(mine)
        if last:
            self._last_release()

    # -- owners (graphs, executables) --------------------------------------------------------------

    def _adopt(
        self, owner: object, count: int = 1, *, move: bool = False, bounded: bool = False
    ) -> bool:
        """Record ``count`` references as held by ``owner``.

        Without ``move`` the references are new ones. With ``move`` the owner takes over
        references the caller already holds (``hipGraphUserObjectMove``), so the total does
        not change. As in HIP, a moved count is not checked against what the caller holds.

        Returns:
            False if the object is already dead (nothing happens, as HIP does for an unknown
            object), True otherwise.

        With ``bounded`` (a user's own retain), a count that would take the object's total, or
        the owner's share, past INT_MAX is refused.

        Raises:
            InvalidValue: ``count`` out of range, or (``bounded``) a total past INT_MAX.
        """
        count = check_count(count)
        with self._ref_lock:
            if not self._refcount:
                return False
            key = owner_key(owner)
            owned = self._owned.get(key, 0) + count
            if bounded:  # the owner's share, and (new references) the object's total
                _check_total(max(owned, self._refcount + (0 if move else count)), "references")
            if not move:
                self._refcount += count
            # With move, HIP never checks the count against the references the caller holds;
            # ``disown`` drops at most what is left, so the destructor still runs exactly once.
            self._owned[key] = owned
            return True

    def _disown(self, owner: object, count: int | None = None) -> bool:
        """Give back ``count`` of the references ``owner`` holds (all of them by default).

        Asking for more than the owner holds, or for an owner holding none, does nothing.
        If plain releases already took some of the owner's references, only what is left of
        the count is dropped, so the destructor still runs exactly once.

        Returns:
            True if this call ran the destructor.

        Raises:
            InvalidValue: ``count`` is outside 1..INT_MAX.
        """
        if count is not None:
            count = check_count(count)
        key = owner_key(owner)
        with self._ref_lock:
            held = self._owned.get(key, 0)
            if not held or (count is not None and count > held):
                return False
            drop = held if count is None else count
            if held == drop:
                del self._owned[key]
            else:
                self._owned[key] = held - drop
            drop = min(drop, self._refcount)
            last = self._drop_locked(drop) if drop else False
        if last:
            self._last_release()
        return last

    def _owned_by(self, owner: object) -> int:
        """How many references ``owner`` holds."""
        key = owner_key(owner)
        with self._ref_lock:
            return self._owned.get(key, 0)

    @property
    def owners(self) -> frozenset[object]:
        """The owners currently holding references (HIP's ``owning_graphs_``)."""
        with self._ref_lock:
            keys = list(self._owned)
        owners = (owner_of(key) for key in keys)
        return frozenset(owner for owner in owners if owner is not None)

    # -- internals ---------------------------------------------------------------------------------

    def _drop_locked(self, count: int) -> bool:
        self._refcount -= count
        assert self._refcount >= 0, "user object count went negative"
        if self._refcount:
            return False
        self._owned.clear()
        return True

    def _last_release(self) -> None:
        assert self._refcount == 0
        assert not self._owned
        USER_OBJECTS.unregister(self.hid)
        self._life.detach()
        destructor, data = self._life.take()
        if destructor is None:
            # The forgotten-handle finalizer took it first: a handle dropped in a reference
            # cycle is finalized (weak references first) before the ``__del__`` of an object
            # in the same cycle, which may still release it. It ran once; that is all.
            return
        destructor(data)

    def statistics(self) -> UserObjectStatistics:
        """The reference count, how many graphs and executables own references and how many
        they own together, and whether the object is alive (its destructor not yet run)."""
        with self._ref_lock:
            owned = sum(self._owned.values())  # first: see the lock's note in __init__
            refcount, owners = self._refcount, len(self._owned)
        return UserObjectStatistics(refcount, owners, owned, refcount > 0)

    @safe_repr
    def __repr__(self) -> str:
        if not self._refcount:
            return f"<UserObject #{self.hid.slot}.{self.hid.generation} destroyed>"
        return (
            f"<UserObject #{self.hid.slot}.{self.hid.generation} refcount={self._refcount} "
            f"owners={len(self._owned)}>"
        )


def disown_all(objects: list[UserObject], owner: object) -> None:
    """``owner`` gives back its references to ``objects``. Destructors are user code: every
    one runs, then the first error (``BaseException`` included) is raised."""
    first: BaseException | None = None
    for obj in objects:
        try:
            obj._disown(owner)
        except BaseException as error:
            if first is None:
                first = error
    if first is not None:
        try:
            raise first
        finally:
            # The error's traceback holds this frame: without this, the frame would hold the
            # error, a cycle that keeps every caller's frame (and what they hold) for the
            # collector.
            del first
