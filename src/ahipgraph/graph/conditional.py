"""Conditional nodes: IF, WHILE and SWITCH over body graphs (CUDA 12.4's design, HIP's PoC).

``handle = graph.conditional_handle(default=...)`` makes a handle; a kernel sets it from device
code through a ``CondHandle`` parameter (``ahg.set_conditional(h, v)``);
``node, bodies = graph.add_conditional_node(handle, kind, size)`` adds the node and returns its
body graphs, which the caller fills like any graph. When the node runs it reads the handle:

* IF: run ``bodies[0]`` if the value is non-zero; with two bodies, ``bodies[1]`` otherwise;
* WHILE: run the body while the value is non-zero (tested before each iteration; none starts
  once the launch has failed, as the failed work may be what would have ended the loop);
* SWITCH: run ``bodies[value]`` if ``value < size``, nothing otherwise.

Bodies belong to their node as a child-graph node's copy does (destroy the node, not the
body); they are cloned with their graph and instantiated with their parent. A handle belongs to
the graph that made it: a node of that graph, of its clones, or of a body or child graph inside
it may use it; a conditional node of any other graph → ``InvalidValue``, as is (at
instantiate) an executable whose kernel sets another graph's handle that none of its
conditional nodes reads.

HIP's checks: a null handle, a handle of another graph, an unknown kind, WHILE with a size
other than 1, IF with a size other than 1 or 2, SWITCH with a size below 1 → ``InvalidValue``.
Bodies may hold kernel, memcpy, memset, empty, child-graph and conditional nodes (CUDA's list);
anything else is ``NotSupported`` when the parent is instantiated, as is a nesting of
conditional nodes deeper than ``exec.conditional.MAX_CONDITIONAL_DEPTH`` (64) levels.
"""

from __future__ import annotations

import enum
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import InvalidValue
from ..core.ints import as_int, flag_or_none, int_or_none
from ..core.lifecycle import FactoryOnly, safe_repr
from ..device.conditional_arg import HandleToken

if TYPE_CHECKING:
    from .graph import Graph

__all__ = [
    "MAX_SWITCH_BODIES",
    "ConditionalHandle",
    "ConditionalKind",
    "ConditionalNodeParams",
    "check_conditional",
    "make_handle",
    "owns_handle",
]

MAX_SWITCH_BODIES = 1 << 16
"""The most bodies a SWITCH node may have here (CUDA sets no small limit)."""

_UINT32_MAX = (1 << 32) - 1
_FACTORY = FactoryOnly("conditional handles are created with graph.conditional_handle()")
_new_object = object.__new__


class ConditionalKind(enum.IntEnum):
    """``hipGraphConditionalNodeType``."""

    If = 0
    While = 1
    Switch = 2


class ConditionalHandle(HandleToken):
    """A conditional node's handle (``hipGraphConditionalHandle``); pass it to kernels.

    Attributes (read-only: a handle is a value, as HIP's is):
        default: the value the handle takes at the start of every launch (with
            ``assign_default``), or once when the executable is made (without).
        assign_default: re-apply ``default`` at each launch (``hipGraphCondAssignDefault``).
        graph_id: the id of the graph that made it.
    """

    # Weakly referable: a graph keeps the handles its clones may use weakly (graph._handles).
    __slots__ = ("__weakref__", "assign_default", "default", "graph_id")
    assign_default: bool
    default: int
    graph_id: int

    def __init__(self, *args: object, **kwargs: object) -> None:
        """Refuse, whatever the arguments: only ``graph.conditional_handle()`` checks the
        default and records the handle in its graph (a hand-made one, say with a negative
        default, would fail the graph's instantiate with numpy's ``OverflowError``)."""
        _FACTORY.refuse()

    @classmethod
    def _make(cls, graph_id: int, default: int, assign_default: bool) -> ConditionalHandle:
        handle: ConditionalHandle = _new_object(cls)
        HandleToken.__init__(handle)
        set_field = object.__setattr__  # immutable (see HandleToken): set once, here
        set_field(handle, "graph_id", graph_id)
        set_field(handle, "default", default)
        set_field(handle, "assign_default", assign_default)
        return handle

    @safe_repr
    def __repr__(self) -> str:
        return (
            f"<ConditionalHandle #{self.token} graph={self.graph_id} default={self.default}"
            f"{' assign_default' if self.assign_default else ''}>"
        )


@dataclass(frozen=True, slots=True)
class ConditionalNodeParams:
    """``hipConditionalNodeParams``: handle, kind and number of bodies.

    ``bodies`` is an output, as HIP's ``phGraph_out``: ignored by ``graph.add_node``, and in a
    node's ``params`` the body graphs the node owns.
    """

    handle: ConditionalHandle
    kind: ConditionalKind
    size: int = 1
    bodies: tuple[Graph, ...] = ()


def make_handle(graph: Graph, default: Any, assign_default: Any) -> ConditionalHandle:
    """Check the arguments of ``graph.conditional_handle`` and make the handle."""
    graph._check_alive()
    default = as_int(default, "default")
    if not 0 <= default <= _UINT32_MAX:
        raise InvalidValue(f"default {default} is not an unsigned 32-bit value")
    # HIP's flags value (0 or hipGraphCondAssignDefault, 1), taken as every switch flag is
    # (core/ints.py): a bool, a numpy bool or an int; another int is InvalidValue, as HIP's.
    flag = flag_or_none(assign_default)
    if flag is None:
        raise TypeError(f"assign_default must be a bool, got {assign_default!r}")
    if flag not in (0, 1):
        raise InvalidValue(f"flags must be 0 or 1 (assign default), got {flag}")
    # The conversions ran the caller's code (``__index__``, ``__bool__``), which may have
    # destroyed the graph on this thread: a handle of a graph that is gone is refused, not
    # made (its clones, moved past it already, would not own it).
    graph._check_alive()
    from .graph import _LINEAGE  # graph.py imports this module

    handle = ConditionalHandle._make(graph.id, default, bool(flag))
    with _LINEAGE:  # a destroyed original hands its handles to its clones under this lock
        record = graph._life
        handles = record.handles
        if handles is None:
            handles = record.handles = weakref.WeakSet()
        handles.add(handle)  # its clones may use the handle once it is destroyed
    return handle


def _owns(graph: Graph, handle: ConditionalHandle) -> bool:
    """The handle was made by ``graph``, a graph it was cloned from, or a graph enclosing it
    (a body or child graph inside that graph, however deep). A destroyed or collected graph
    is out of its clones' lineage, so a graph also owns the handles in its record's
    ``handles``: those of such graphs it descends from that are still alive (one nobody holds
    can never be asked about). The walk goes over the graphs' records (see graph._GraphRecord),
    a collected graph's too until it has left the lineage, and holds the lineage lock, so a
    graph destroyed meanwhile on another thread, its clones moved on, cannot cut it short.
    """
    from .graph import _LINEAGE  # graph.py imports this module

    pending: list[Any] = [graph._life]
    seen: set[int] = set()
    with _LINEAGE:
        while pending:
            record = pending.pop()
            if record.graph_id in seen:
                continue
            seen.add(record.graph_id)
            if record.graph_id == handle.graph_id:
                return True
            handles = record.handles
            if handles is not None and handle in handles:
                return True
            if record.original is not None:
                pending.append(record.original)
            current: Graph | None = record.handle
            if current is not None and current.owner_node is not None:
                pending.append(current.owner_node.graph._life)
    return False


def owns_handle(graph: Graph, handle: ConditionalHandle) -> bool:
    """``handle`` is ``graph``'s: made by it, a graph it was cloned from, or a graph enclosing
    it (see the module notes)."""
    return _owns(graph, handle)


def check_conditional(
    graph: Graph, handle: Any, kind: Any, size: Any
) -> tuple[ConditionalHandle, ConditionalKind, int]:
    """HIP's checks on a conditional node's handle, kind and size (see the module notes)."""
    if handle is None:
        raise InvalidValue("conditional handle is null")
    if not isinstance(handle, ConditionalHandle):
        raise TypeError(f"expected a handle from graph.conditional_handle(), got {handle!r}")
    if not _owns(graph, handle):
        raise InvalidValue(f"{handle!r} belongs to another graph than {graph!r}")
    number = int_or_none(kind)
    if number is None:
        raise InvalidValue(f"{kind!r} is not a conditional node kind")
    try:
        checked = ConditionalKind(number)
    except ValueError:
        raise InvalidValue(f"{kind!r} is not a conditional node kind") from None
    size = as_int(size, "size")
    allowed = {
        ConditionalKind.If: (1, 2),
        ConditionalKind.While: (1, 1),
        ConditionalKind.Switch: (1, MAX_SWITCH_BODIES),
    }[checked]
    if not allowed[0] <= size <= allowed[1]:
        takes = {
            ConditionalKind.If: "an If node takes 1 or 2 bodies (the second runs on 0)",
            ConditionalKind.While: "a While node takes exactly 1 body",
            ConditionalKind.Switch: f"a Switch node takes 1..{MAX_SWITCH_BODIES} bodies",
        }[checked]
        raise InvalidValue(f"{takes}, got {size}")
    return handle, checked, size
