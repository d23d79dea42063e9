"""Race reports: the two sides of a race, where they were made, and how a report is raised.

Shared by the static check (:mod:`.races`) and the dynamic checker
(:mod:`ahipgraph.tools.race`). :data:`SITES` remembers, while the dynamic checker is on, the
user's line that allocated a buffer or added a node, so a report can name it;
:func:`user_site` finds that line on the stack.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..device.pointer import DevicePtr
from ..runtime.device import get_device
from .footprints import allocation_of

if TYPE_CHECKING:
    from ..graph.node import GraphNode

__all__ = [
    "SHOWN_FILES",
    "SITES",
    "RaceError",
    "RaceReport",
    "RaceSite",
    "RaceWarning",
    "describe_allocation",
    "kind_of",
    "shown_file",
    "user_site",
]

_MAX_SITES = 1 << 16


class _Sites:
    """Where things were made: allocations by (id of device memory, base), nodes by handle.

    Filled by the dynamic checker while it is on (and only then): reports name the line that
    allocated a buffer or added a node. Bounded: the oldest entries go first.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.allocations: dict[tuple[int, int], str] = {}
        self.nodes: dict[Any, str] = {}

    def remember(self, table: dict[Any, str], key: Any, site: str) -> None:
        with self._lock:
            table[key] = site
            if len(table) > _MAX_SITES:
                for old in list(table)[: _MAX_SITES // 2]:
                    del table[old]

    def clear(self) -> None:
        with self._lock:
            self.allocations.clear()
            self.nodes.clear()

    def statistics(self) -> dict[str, int]:
        return {"allocations": len(self.allocations), "nodes": len(self.nodes)}

    def __repr__(self) -> str:
        return f"<Sites allocations={len(self.allocations)} nodes={len(self.nodes)}>"


SITES = _Sites()

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SKIP = (_PACKAGE_DIR, os.path.dirname(os.__file__))


# file name -> as shown in reports, or "" for ahipgraph's and the standard library's files
# (one dict lookup per frame: the checker asks on every op, and its site text reads it too;
# relative paths are slow)
SHOWN_FILES: dict[str, str] = {}


def shown_file(filename: str) -> str:
    if filename.startswith(_SKIP) or filename.startswith("<frozen"):
        shown = ""
    else:
        shown = filename if filename.startswith("<") else os.path.relpath(filename)
    if len(SHOWN_FILES) < _MAX_SITES:
        SHOWN_FILES[filename] = shown
    return shown


def user_site(depth: int = 1) -> str | None:
    """``file:line`` of the innermost caller outside ahipgraph and the standard library."""
    frame: Any = sys._getframe(depth)
    known = SHOWN_FILES
    while frame is not None:
        filename = frame.f_code.co_filename
        shown = known.get(filename)
        if shown is None:
            shown = shown_file(filename)
        if shown:
            return f"{shown}:{frame.f_lineno}"
        frame = frame.f_back
    return None


@dataclass(frozen=True)
class RaceSite:
    """One side of a race: what ran, where it was ordered, the user's line and the bytes."""

    op: str  # "op #14 Kernel 'scale'" or "node 7 (Kernel 'scale')"
    where: str  # "stream #3", "null stream", "host" or "graph 5"
    source: str | None
    start: int
    end: int
    precision: str
    write: bool
    node: GraphNode | None = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        what = "writes" if self.write else "reads"
        line = f" at {self.source}" if self.source else ""
        return (
            f"{self.op} on {self.where}{line} {what} "
            f"[0x{self.start:x}, 0x{self.end:x}) ({self.end - self.start} B, {self.precision})"
        )


@dataclass(frozen=True)
class RaceReport:
    """Two unordered accesses to the same bytes, at least one a write.

    Attributes:
        kind: "read-after-write", "write-after-read", "write-after-write", or
            "host-write-during-copy" (a host source array changed while its async copy was
            in flight).
        first, second: the earlier and the later side (API order, or topological order).
        allocation: the allocation, with the line that made it when known.
        why: why nothing orders the two.
        fix: a one-line fix.
        fix_edge: for graphs, the (from, to) nodes ``add_dependencies`` should link.
    """

    kind: str
    first: RaceSite
    second: RaceSite
    allocation: str
    why: str
    fix: str
    fix_edge: tuple[GraphNode, GraphNode] | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return "\n".join(
            (
                f"race ({self.kind}) on {self.allocation}",
                f"  first:  {self.first.describe()}",
                f"  second: {self.second.describe()}",
                f"  why:    {self.why}",
                f"  fix:    {self.fix}",
            )
        )


class RaceError(Exception):
    """Raised with the race reports a check found (``instantiate(check_races=True)``, or
    ``ahg.race_check(on_race="raise")``). ``reports`` holds every :class:`RaceReport`."""

    def __init__(self, reports: list[RaceReport]) -> None:
        self.reports = list(reports)
        count = len(self.reports)
        head = f"{count} race{'s' if count != 1 else ''} found"
        super().__init__("\n".join([head, *(str(r) for r in self.reports)]))

    def __reduce__(self) -> tuple[type[RaceError], tuple[list[RaceReport]]]:
        # Copied or pickled by calling the class with ``args`` (the message), this constructor
        # would take the message's characters for reports: rebuild it from the reports.
        return (type(self), (self.reports,))


class RaceWarning(UserWarning):
    """Issued for each race found by ``ahg.race_check(on_race="warn")``."""


def kind_of(first_write: bool, second_write: bool) -> str:
    if first_write and second_write:
        return "write-after-write"
    return "read-after-write" if first_write else "write-after-read"


def describe_allocation(device: int, address: int) -> str:
    found = allocation_of(DevicePtr(device, address))
    if found is None:
        return f"device {device} memory at 0x{address:x} (no live allocation)"
    base, nbytes = found
    site = SITES.allocations.get((id(get_device(device).memory), base))
    made = f", allocated at {site}" if site else ""
    return f"allocation 0x{base:x} ({nbytes} B, device {device}{made})"
