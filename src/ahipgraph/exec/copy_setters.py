"""The executable's setters for pitched and symbol memcpy nodes.

``hipGraphExecMemcpyNodeSetParams`` (3D), ``...ToSymbol`` and ``...FromSymbol``, with HIP's
rules (HIP_SEMANTICS §setters): the kind must equal the node's own (``InvalidValue``); a symbol
is resolved on the executable's device, and a symbol copy whose device memory would move to
another device than the node's → ``InvalidValue``, on either side: the symbol's (the executable
runs on another device than the node was made for) or the caller's endpoint (HIP compares the
new ``src``/``dst`` pointer's device with the original's); a null symbol → ``InvalidSymbol``,
checked before the executable and the node as HIP checks it; a count of 0 → ``InvalidValue``.
Like the other setters (:mod:`.setters`), these are module functions over the executable's
updater, and a change never disturbs a launch already enqueued.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.errors import InvalidValue
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind, copy_kind_or_none
from ..graph.node_type import NodeType
from ..graph.params import null_symbol, symbol_node_params
from ..runtime.params import Endpoint, MemcpyParams
from ..runtime.pitched import PitchedCopyParams, PitchedPtr
from ..runtime.stream_copies import from_symbol_params, to_symbol_params

if TYPE_CHECKING:
    from ..graph.node import GraphNode
    from .snapshot import ExecNode
    from .updater import Updater

__all__ = [
    "check_same_kind",
    "set_memcpy_3d_node_params",
    "set_memcpy_record",
    "set_memcpy_node_from_symbol",
    "set_memcpy_node_to_symbol",
]

Triple = tuple[int, int, int]


def check_same_kind(exec_node: ExecNode, kind: CopyKind | int | None) -> None:
    """HIP's setter rule: a memcpy node's kind, if given, is its own (``InvalidValue``)."""
    if kind is None:
        return
    original = exec_node.params.kind
    given = copy_kind_or_none(kind)
    if given is None:
        raise InvalidValue(f"{kind!r} is not a memcpy kind")
    if given is not original:
        raise InvalidValue(f"a memcpy node's kind is fixed: {original.name}, not {given.name}")


def _same_device(old: Any, new: Any, role: str) -> None:
    if isinstance(old, DevicePtr) and isinstance(new, DevicePtr) and old.device != new.device:
        raise InvalidValue(f"the {role} of a symbol copy cannot move to device {new.device}")


def set_memcpy_3d_node_params(
    updater: Updater,
    node: GraphNode,
    dst: PitchedPtr,
    src: PitchedPtr,
    extent: Triple,
    dst_pos: Triple,
    src_pos: Triple,
    kind: CopyKind | int | None,
) -> None:
    """``hipGraphExecMemcpyNodeSetParams``: a pitched copy in the node's direction."""
    exec_node = updater.node(node, NodeType.Memcpy)
    check_same_kind(exec_node, kind)
    params = PitchedCopyParams.make_pitched(
        dst, src, extent, dst_pos=dst_pos, src_pos=src_pos, kind=kind, device=updater.device
    )
    updater.set(exec_node, params)


def set_memcpy_record(updater: Updater, node: GraphNode, record: PitchedCopyParams) -> None:
    """A whole pitched-copy record (generic setter): the copy stays pitched, in its direction."""
    exec_node = updater.node(node, NodeType.Memcpy)
    check_same_kind(exec_node, record.kind)
    updater.set(exec_node, record.revalidated(updater.device))


def set_memcpy_node_to_symbol(
    updater: Updater,
    node: GraphNode,
    symbol: Any,
    src: Endpoint,
    nbytes: int | None,
    offset: int,
    kind: CopyKind | int | None,
) -> None:
    """``hipGraphExecMemcpyNodeSetParamsToSymbol``."""
    null_symbol(symbol)
    exec_node = updater.node(node, NodeType.Memcpy)
    params = symbol_node_params(
        src,
        "src",
        nbytes,
        lambda: to_symbol_params(symbol, src, nbytes, offset, kind, device=updater.device),
    )
    check_same_kind(exec_node, kind)
    old: MemcpyParams = exec_node.params
    _same_device(old.dst, params.dst, "destination")
    _same_device(old.src, params.src, "source")
    updater.set(exec_node, params)


def set_memcpy_node_from_symbol(
    updater: Updater,
    node: GraphNode,
    dst: Endpoint,
    symbol: Any,
    nbytes: int | None,
    offset: int,
    kind: CopyKind | int | None,
) -> None:
    """``hipGraphExecMemcpyNodeSetParamsFromSymbol``."""
    null_symbol(symbol)
    exec_node = updater.node(node, NodeType.Memcpy)
    params = symbol_node_params(
        dst,
        "dst",
        nbytes,
        lambda: from_symbol_params(dst, symbol, nbytes, offset, kind, device=updater.device),
    )
    check_same_kind(exec_node, kind)
    old: MemcpyParams = exec_node.params
    _same_device(old.src, params.src, "source")
    _same_device(old.dst, params.dst, "destination")
    updater.set(exec_node, params)
