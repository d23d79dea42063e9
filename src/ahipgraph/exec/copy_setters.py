"""The executable's setters for pitched and symbol memcpy nodes.

``hipGraphExecMemcpyNodeSetParams`` (3D), ``...ToSymbol`` and ``...FromSymbol``, with HIP's
rules (HIP_SEMANTICS §setters): the kind must equal the node's own (``InvalidValue``); a symbol
is resolved on the executable's device, and a symbol copy whose device endpoint would move to
another device than the node's → ``InvalidValue``; a null symbol → ``InvalidSymbol``. Like the
other setters, a change never disturbs a launch already enqueued.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.errors import InvalidValue
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind
from ..graph.node_type import NodeType
from ..runtime.params import Endpoint, MemcpyParams
from ..runtime.pitched import PitchedCopyParams, PitchedPtr
from ..runtime.stream_copies import from_symbol_params, to_symbol_params

if TYPE_CHECKING:
    from ..graph.node import GraphNode
    from ..runtime.device import Device
    from .snapshot import ExecNode

__all__ = ["ExecCopySetters"]

Triple = tuple[int, int, int]


def _same_kind(exec_node: ExecNode, kind: CopyKind | int | None) -> None:
    if kind is None:
        return
    original = exec_node.params.kind
    try:
        given = CopyKind(kind)
    except ValueError:
        raise InvalidValue(f"{kind!r} is not a memcpy kind") from None
    if given is not original:
        raise InvalidValue(f"a memcpy node's kind is fixed: {original.name}, not {given.name}")


def _same_device(old: Any, new: Any, role: str) -> None:
    if isinstance(old, DevicePtr) and isinstance(new, DevicePtr) and old.device != new.device:
        raise InvalidValue(f"the {role} of a symbol copy cannot move to device {new.device}")


class ExecCopySetters:
    """Mixin of :class:`~ahipgraph.GraphExec`."""

    __slots__ = ()

    device: Device

    def _node(self, node: GraphNode, *types: NodeType) -> ExecNode:
        raise NotImplementedError

    def _set(self, exec_node: ExecNode, params: Any) -> None:
        raise NotImplementedError

    def set_memcpy_3d_node_params(
        self,
        node: GraphNode,
        dst: PitchedPtr,
        src: PitchedPtr,
        extent: Triple,
        *,
        dst_pos: Triple = (0, 0, 0),
        src_pos: Triple = (0, 0, 0),
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphExecMemcpyNodeSetParams``: a pitched copy in the node's direction."""
        exec_node = self._node(node, NodeType.Memcpy)
        _same_kind(exec_node, kind)
        params = PitchedCopyParams.make_pitched(
            dst, src, extent, dst_pos=dst_pos, src_pos=src_pos, kind=kind, device=self.device
        )
        self._set(exec_node, params)

    def set_memcpy_node_to_symbol(
        self,
        node: GraphNode,
        symbol: Any,
        src: Endpoint,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphExecMemcpyNodeSetParamsToSymbol``."""
        exec_node = self._node(node, NodeType.Memcpy)
        params = to_symbol_params(symbol, src, nbytes, offset, kind, device=self.device)
        _same_kind(exec_node, kind)
        old: MemcpyParams = exec_node.params
        _same_device(old.dst, params.dst, "destination")
        self._set(exec_node, params)

    def set_memcpy_node_from_symbol(
        self,
        node: GraphNode,
        dst: Endpoint,
        symbol: Any,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphExecMemcpyNodeSetParamsFromSymbol``."""
        exec_node = self._node(node, NodeType.Memcpy)
        params = from_symbol_params(dst, symbol, nbytes, offset, kind, device=self.device)
        _same_kind(exec_node, kind)
        old: MemcpyParams = exec_node.params
        _same_device(old.src, params.src, "source")
        self._set(exec_node, params)
