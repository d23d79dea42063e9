"""Graphviz DOT output in the shape of HIP's ``hipGraphDebugDotPrint``.

Layout (HIP's)::

    digraph dot {
    subgraph cluster_<gid> {
    label="graph_<gid>"graph[style="dashed"];
    "graph_<gid>_node_<nid>"[style="..."shape="..."label="..."];     one per node, insertion order
    "graph_<gid>_node_<a>" -> "graph_<gid>_node_<b>"                  one per edge, insertion order
    }
    <each child graph's cluster, after its parent's closes, depth first>
    }

Node styles, shapes and labels are HIP's: kernel, a bold octagon labelled with the kernel's
name; memcpy, a trapezium ``MEMCPY (HtoD,<bytes>)`` (a pitched 3D copy ``MEMCPY (HtoD)``, as
HIP labels its 3D copy node); memset, an inverted trapezium
``MEMSET (<value>,<bytes>)``; child graph ``graph_<child id>``; the rest rectangles named after
their type (``HOST``, ``EMPTY``, ``EVENT_RECORD``, ``EVENT_WAIT``, ``MEM_ALLOC``, ``MEM_FREE``).

Deliberate differences from HIP:
  * Line breaks inside labels are written as the DOT escape ``\\n`` rather than raw newlines,
    so every node and every edge is exactly one line (and HIP's blank lines are left out).
  * Flags are a bit mask: ``Verbose`` turns on every parameter table, and each ``*NodeParams``
    flag turns on its own kind's (HIP compares the whole value with ``==``). Any value is
    accepted, as in HIP. Host and event nodes get tables too (HIP prints none), and HIP's
    kernel-flag quirk that drops a closing quote is not reproduced, so the output stays valid.
  * Verbose tables show what a simulated device has (no remainders); with Verbose or
    KernelNodeAttributes a kernel's table adds its priority, cooperative flag and window.
"""

from __future__ import annotations

import contextlib
import enum
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import InvalidValue, NotSupported, OperatingSystem
from ..core.ints import as_int
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind
from ..runtime.params import HostParams, KernelParams, MemcpyParams, MemsetParams
from ..runtime.pitched import PitchedCopyParams
from .conditional import ConditionalNodeParams
from .node import GraphNode, edge_nodes
from .node_type import NodeType
from .params import ChildGraphParams, EventParams, MemAllocParams, MemFreeParams

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["DotFlags", "render", "to_dot", "write_dot"]


class DotFlags(enum.IntFlag):
    """``hipGraphDebugDotFlags`` (HIP's names and values)."""

    Verbose = 1 << 0
    KernelNodeParams = 1 << 2
    MemcpyNodeParams = 1 << 3
    MemsetNodeParams = 1 << 4
    HostNodeParams = 1 << 5
    EventNodeParams = 1 << 6
    ExtSemasSignalNodeParams = 1 << 7
    ExtSemasWaitNodeParams = 1 << 8
    KernelNodeAttributes = 1 << 9
    Handles = 1 << 10


# (style, shape, HIP's label word) per node type.
_LOOK: dict[NodeType, tuple[str, str, str]] = {
    NodeType.Kernel: ("bold", "octagon", "KERNEL"),
    NodeType.Memcpy: ("solid", "trapezium", "MEMCPY"),
    NodeType.Memset: ("solid", "invtrapezium", "MEMSET"),
    NodeType.Host: ("solid", "rectangle", "HOST"),
    NodeType.Graph: ("solid", "rectangle", "GRAPH"),
    NodeType.Empty: ("solid", "rectangle", "EMPTY"),
    NodeType.WaitEvent: ("solid", "rectangle", "EVENT_WAIT"),
    NodeType.EventRecord: ("solid", "rectangle", "EVENT_RECORD"),
    NodeType.MemAlloc: ("solid", "rectangle", "MEM_ALLOC"),
    NodeType.MemFree: ("solid", "rectangle", "MEM_FREE"),
    NodeType.Conditional: ("solid", "diamond", "CONDITIONAL"),
}

_DIRECTION = {
    CopyKind.HostToHost: "HtoH",
    CopyKind.HostToDevice: "HtoD",
    CopyKind.DeviceToHost: "DtoH",
    CopyKind.DeviceToDevice: "DtoD",
}

# The flags as plain ints: a node's test of ``flags & DotFlags.X`` would otherwise go through
# the enum's operators, a dozen Python calls per node of a large graph.
_VERBOSE = int(DotFlags.Verbose)
_HANDLES = int(DotFlags.Handles)
_KERNEL_ATTRIBUTES = int(DotFlags.KernelNodeAttributes)
_DETAIL_FLAGS: dict[NodeType, int] = {
    NodeType.Kernel: int(DotFlags.KernelNodeParams | DotFlags.KernelNodeAttributes),
    NodeType.Memcpy: int(DotFlags.MemcpyNodeParams),
    NodeType.Memset: int(DotFlags.MemsetNodeParams),
    NodeType.Host: int(DotFlags.HostNodeParams),
    NodeType.WaitEvent: int(DotFlags.EventNodeParams),
    NodeType.EventRecord: int(DotFlags.EventNodeParams),
}

# Lines joined into one piece of text at a time (see _fold).
LINES_PER_PIECE = 4096


def to_dot(graph: Graph, flags: int = 0, races: Sequence[Any] | None = None) -> str:
    """The DOT text for ``graph`` and its child graphs.

    ``races`` (reports from ``graph.check_races()``) draws each racing pair in red, joined by
    a dotted red line labelled with the race's kind, and the suggested edge in green.

    Raises:
        InvalidValue: the graph was destroyed. TypeError: ``flags`` is not an int, or
        ``races`` is not a sequence of race reports. ValueError: a report names a node of
        another graph (one not drawn here).
    """
    flags = as_int(flags, "flags")
    race_lines = _race_lines(graph, races)
    lines = ["digraph dot {"]
    with graph.lock:
        graph._check_alive()
        _cluster(graph, int(flags), lines)
    lines.extend(race_lines)
    lines.append("}")
    lines.append("")  # the text's closing newline, without a copy of the text to add it
    return "\n".join(lines)


def _dot_id(node: GraphNode) -> str:
    return f'"graph_{node.graph.id}_node_{node.id}"'


def _race_lines(graph: Graph, races: Sequence[Any] | None) -> list[str]:
    """The overlay for race reports: racing nodes, the race, the suggested edge."""
    if races is None:
        return []
    if isinstance(races, str | bytes) or not isinstance(races, Sequence):
        raise TypeError(f"races must be a sequence of race reports, got {races!r}")
    lines: list[str] = []
    for report in races:
        first = getattr(getattr(report, "first", None), "node", None)
        second = getattr(getattr(report, "second", None), "node", None)
        if first is None and second is None and not hasattr(report, "kind"):
            raise TypeError(f"not a race report: {report!r}")
        edge = getattr(report, "fix_edge", None)
        # What the overlay reads, checked before it is read: nodes, a kind to label the race
        # with, and a suggested edge of two nodes.
        if (
            not all(node is None or isinstance(node, GraphNode) for node in (first, second))
            or (first is not None and second is not None and not hasattr(report, "kind"))
            or not (edge is None or _is_edge(edge))
        ):
            raise TypeError(f"not a race report: {report!r}")
        # Another graph's report (a clone's, or a different graph's) would be drawn as
        # nodes and edges of that graph's clusters, which are not in this text.
        for node in (first, second, *(edge or ())):
            if node is not None and not _drawn_in(graph, node):
                raise ValueError(f"a race report names {node!r}, not a node of {graph!r}")
        for node in (first, second):
            if node is not None:
                lines.append(f'{_dot_id(node)}[color="red"penwidth="2"];')
        if first is not None and second is not None:
            lines.append(
                f'{_dot_id(first)} -> {_dot_id(second)}[color="red"style="dotted"dir="both"'
                f'constraint="false"label="{_text(str(report.kind))}"];'
            )
        if edge is not None:
            lines.append(
                f'{_dot_id(edge[0])} -> {_dot_id(edge[1])}[color="darkgreen"style="dashed"'
                f'penwidth="2"label="add this edge"];'
            )
    return lines


def _drawn_in(graph: Graph, node: GraphNode) -> bool:
    """Whether ``node`` is in ``graph`` or in a graph it embeds (a child graph or a
    conditional body, however deep): the graphs :func:`to_dot` draws."""
    holder: Graph | None = node.graph
    while holder is not None:
        if holder is graph:
            return True
        owner = holder.owner_node
        holder = owner.graph if owner is not None else None
    return False


def _is_edge(edge: object) -> bool:
    """Whether a report's ``fix_edge`` is two nodes."""
    return (
        isinstance(edge, tuple)
        and len(edge) == 2
        and isinstance(edge[0], GraphNode)
        and isinstance(edge[1], GraphNode)
    )


def _checked_path(path: object) -> str | os.PathLike[str]:
    """The argument checks of a call that writes a file: a null path, then its type."""
    if path is None:
        raise InvalidValue("path is null")
    if not isinstance(path, str | os.PathLike):  # open() would take an int as a descriptor
        raise TypeError(f"path must be a str or os.PathLike, got {path!r}")
    return path


def write_dot(graph: Graph, path: str | os.PathLike[str] | None, flags: int = 0) -> None:
    """Write :func:`to_dot` to ``path``.

    Raises:
        InvalidValue: destroyed graph or null path. OperatingSystem: the file cannot be written.
    """
    graph._check_alive()
    checked = _checked_path(path)
    text = to_dot(graph, flags)
    try:
        with open(checked, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as error:
        raise OperatingSystem(f"cannot write {os.fspath(checked)!r}: {error.strerror}") from None


def render(graph: Graph, path: str | os.PathLike[str], format: str = "svg", flags: int = 0) -> None:
    """Run Graphviz's ``dot -T<format>`` on the graph's DOT text, writing ``path``.

    Raises:
        NotSupported: ``dot`` is not on PATH. OperatingSystem: ``dot`` failed.
        InvalidValue: destroyed graph or null path (before Graphviz is looked for).
        ValueError: ``format`` is not a plain format name. TypeError: bad argument types.
    """
    graph._check_alive()
    checked = _checked_path(path)
    if not isinstance(format, str):
        raise TypeError(f"format must be a str, got {format!r}")
    if not format.isalnum():
        raise ValueError(f"not a Graphviz output format: {format!r}")
    text = to_dot(graph, flags)
    program = shutil.which("dot")
    if program is None:
        raise NotSupported("Graphviz 'dot' is not installed")
    try:
        result = subprocess.run(
            [program, f"-T{format}", "-o", os.fspath(checked)],
            input=text,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise OperatingSystem(f"running dot failed: {error}") from None
    if result.returncode:
        raise OperatingSystem(f"dot exited with {result.returncode}: {result.stderr.strip()}")


def _cluster(graph: Graph, flags: int, lines: list[str]) -> None:
    """Append ``graph``'s cluster, then its children's, depth first (graph lock held).

    A work list, not recursion, so deeply nested child graphs cannot overflow the stack; each
    child's lock is held until the whole text is made (parent before child).
    """
    with contextlib.ExitStack() as locks:
        stack = [graph]
        while stack:
            current = stack.pop()
            if current is not graph:
                locks.enter_context(current.lock)
            nodes = _one_cluster(current, flags, lines)
            children = [n._params.graph for n in nodes if isinstance(n._params, ChildGraphParams)]
            for n in nodes:  # a conditional node's bodies are drawn like child graphs
                if isinstance(n._params, ConditionalNodeParams):
                    children.extend(n._params.bodies)
            stack.extend(reversed(children))


def _one_cluster(graph: Graph, flags: int, lines: list[str]) -> list[GraphNode]:
    gid = graph.id
    nodes = graph._ordered_nodes()
    lines.append(f"subgraph cluster_{gid} {{")
    lines.append(f'label="graph_{gid}"graph[style="dashed"];')
    prefix = f'"graph_{gid}_node_'
    names: dict[str, str] = {}  # a kernel's name -> its escaped text, made once per name
    # One walk over the nodes (a large graph's nodes are far apart in memory, and a second walk
    # would fetch each again), making the node lines and the edge lines side by side.
    node_lines: list[str] = []
    edge_lines: list[str] = []
    node_line, edge_line = node_lines.append, edge_lines.append
    for first in range(0, len(nodes), LINES_PER_PIECE):
        node_start, edge_start = len(node_lines), len(edge_lines)
        for node in nodes[first : first + LINES_PER_PIECE]:
            style, shape, label = _node_look(node, flags, names)
            head = f'{prefix}{node.id}"'
            node_line(f'{head}[style="{style}"shape="{shape}"label="{label}"];')
            for succ in edge_nodes(node._dependents):
                edge_line(f'{head} -> {prefix}{succ.id}"')
        _fold(node_lines, node_start)
        _fold(edge_lines, edge_start)
    lines += node_lines
    lines += edge_lines
    lines.append("}")
    return nodes


def _fold(lines: list[str], start: int) -> None:
    """Join ``lines[start:]`` into one piece of text (the final join puts the same newlines
    between pieces as between lines).

    A large graph's text made line by line would keep every line alive until the end: a few
    hundred bytes a node of fresh memory, whose page faults make a million-node graph's text
    cost more per node than a small one's. Joined a few thousand at a time, the lines are freed
    as they go and their memory is reused for the next ones.
    """
    if len(lines) - start > 1:
        lines[start:] = ["\n".join(lines[start:])]


def _node_look(node: GraphNode, flags: int, names: dict[str, str]) -> tuple[str, str, str]:
    """The node's style, shape and label; ``names`` caches kernel names' escaped text."""
    style, shape, word = _LOOK[node._type]
    params = node._params
    nid = node.id
    if flags and (flags & _VERBOSE or flags & _DETAIL_FLAGS.get(node._type, 0)):
        table = _table(node, word, flags)
        if table is not None:
            return style, "record", table
    if isinstance(params, KernelParams):
        name = params.kernel.name
        text = names.get(name)
        if text is None:
            text = names[name] = _text(name)
        label = f"{nid}\\n{text}\\n"
    elif isinstance(params, PitchedCopyParams):
        # HIP's 3D copy node (GraphMemcpyNode) names only its direction: its size is a shape,
        # which the MemcpyNodeParams table shows.
        label = f"{nid}\\n{word}\\n({_DIRECTION[params.kind]})"
    elif isinstance(params, MemcpyParams):
        label = f"{nid}\\n{word}\\n({_DIRECTION[params.kind]},{params.nbytes})"
    elif isinstance(params, MemsetParams):
        label = f"{nid}\\n{word}\\n({params.value},{params.nbytes})"
    elif isinstance(params, ChildGraphParams):
        label = f"{nid}\\ngraph_{params.graph.id}"
    elif isinstance(params, ConditionalNodeParams):
        bodies = ",".join(f"graph_{body.id}" for body in params.bodies)
        label = f"{nid}\\n{params.kind.name.upper()}\\n({bodies})"
    else:
        label = f"{nid}\\n{word}"
    return style, shape, label


def _table(node: GraphNode, word: str, flags: int) -> str | None:
    """A record label with the node's parameters, or None for kinds that have none."""
    params = node._params
    head = f"{{ID | {node.id}}}"
    if flags & (_HANDLES | _VERBOSE):
        head = f"{{{{ID | node handle}} | {{{node.id} | {node.hid.slot}.{node.hid.generation}}}}}"
    rows: list[str]
    if isinstance(params, KernelParams):
        grid, block = params.grid, params.block
        launch = (
            f"{_field(params.kernel.name)}\\<\\<\\<({grid.x},{grid.y},{grid.z}),"
            f"({block.x},{block.y},{block.z}),{params.shared_mem}\\>\\>\\>"
        )
        rows = [f"{{launch | {launch}}}", _pairs_row(args=len(params.args))]
        rows.append(_pairs_row(arg_bytes=len(params.arg_bytes)))
        if flags & (_KERNEL_ATTRIBUTES | _VERBOSE):
            window = params.attributes.access_policy_window
            rows.append(
                _pairs_row(
                    priority=params.priority,
                    cooperative=int(params.attributes.cooperative),
                    window_base="NULL" if window.base_ptr is None else _where(window.base_ptr),
                    window_bytes=window.num_bytes,
                    hit_ratio=window.hit_ratio,
                    hit_prop=window.hit_prop.name,
                    miss_prop=window.miss_prop.name,
                )
            )
    elif isinstance(params, MemcpyParams):
        rows = [
            f"{{kind | {_DIRECTION[params.kind]}}}",
            _pairs_row(src=_where(params.src), dst=_where(params.dst), bytes=params.nbytes),
        ]
        if isinstance(params, PitchedCopyParams):
            rows.append(
                _pairs_row(
                    src_pitch=params.src_pitch,
                    dst_pitch=params.dst_pitch,
                    width=params.width,
                    height=params.height,
                    depth=params.depth,
                )
            )
    elif isinstance(params, MemsetParams):
        rows = [
            _pairs_row(
                dptr=_where(params.dst),
                pitch=params.pitch,
                value=params.value,
                elementSize=params.element_size,
                width=params.width,
                height=params.height,
            )
        ]
    elif isinstance(params, HostParams):
        rows = [_pairs_row(fn=_callable_name(params.fn), args=len(params.args))]
    elif isinstance(params, EventParams):
        rows = [_pairs_row(event=f"{params.event.hid.slot}.{params.event.hid.generation}")]
    elif isinstance(params, MemAllocParams):
        rows = [_pairs_row(dptr=_where(params.ptr), bytesize=params.nbytes, device=params.device)]
    elif isinstance(params, MemFreeParams):
        rows = [_pairs_row(dptr=_where(params.ptr))]
    else:
        return None
    # HIP separates the rows with raw newlines, which are only whitespace to Graphviz; a "\\n"
    # escape there would be text after a closed field, which Graphviz rejects.
    return "{" + " | ".join([word, head, *rows]) + "}"


def _pairs_row(**fields: Any) -> str:
    names = " | ".join(_field(name) for name in fields)
    values = " | ".join(_field(str(value)) for value in fields.values())
    return f"{{{{{names}}} | {{{values}}}}}"


def _where(end: object) -> str:
    if isinstance(end, DevicePtr):
        return f"0x{end.address:x}" if end else "NULL"
    if isinstance(end, np.ndarray):
        return f"host[{end.nbytes}]"
    return type(end).__name__


def _callable_name(fn: object) -> str:
    # A callable's names and repr are user code, which may raise: its type names it then, so
    # the graph can still be printed.
    try:
        return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))
    except Exception:
        return type(fn).__qualname__


def _text(value: str) -> str:
    """Escape free text for a DOT double-quoted string."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _field(value: str) -> str:
    """Escape free text for a record-label field (the record syntax characters too)."""
    value = _text(value)
    for char in "{}|<>":
        value = value.replace(char, "\\" + char)
    return value
