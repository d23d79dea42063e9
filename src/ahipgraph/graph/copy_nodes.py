"""Pitched (3D) and symbol memcpy nodes: the ``Graph`` adds and the ``GraphNode`` setters.

The adds are module functions over the graph they are given (``Graph``'s public methods call
them); the setters are still a mixin of ``GraphNode``.

``hipGraphAddMemcpyNode`` (with ``hipMemcpy3DParms``), ``hipGraphAddMemcpyNodeToSymbol`` and
``hipGraphAddMemcpyNodeFromSymbol`` and their ``hipGraphMemcpyNodeSetParams*`` twins. Every
node made here is a ``Memcpy`` node (HIP's symbol nodes report ``Memcpy`` too), validated by
the builders streams use (:mod:`ahipgraph.runtime.pitched`, :mod:`ahipgraph.runtime.stream_copies`);
a symbol is resolved on the calling task's current device when the node is made, as HIP
resolves it for the node's device. The direction of a memcpy node is fixed once it is made.

A symbol copy node, unlike a stream's symbol copy, refuses a count of 0 (InvalidValue), and
its setters check for a null symbol first (InvalidSymbol, before the node handle), in HIP's
order (``symbol_node_params`` and ``null_symbol`` in :mod:`ahipgraph.graph.params`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..device.properties import CopyKind
from ..runtime.device import get_device
from ..runtime.params import Endpoint
from ..runtime.pitched import PitchedCopyParams, PitchedPtr
from ..runtime.stream_copies import from_symbol_params, to_symbol_params
from .node_type import NodeType
from .params import null_symbol, symbol_node_params

if TYPE_CHECKING:
    from ..device.symbols import SymbolLike
    from .builder import Deps
    from .graph import Graph
    from .node import GraphNode
    from .params import NodeParams

__all__ = [
    "NodeCopySetters",
    "add_memcpy_3d_node",
    "add_memcpy_node_from_symbol",
    "add_memcpy_node_to_symbol",
]

Triple = tuple[int, int, int]


def add_memcpy_3d_node(
    graph: Graph,
    dst: PitchedPtr,
    src: PitchedPtr,
    extent: Triple,
    dst_pos: Triple,
    src_pos: Triple,
    kind: CopyKind | int | None,
    deps: Deps,
) -> GraphNode:
    """A pitched copy node (``hipGraphAddMemcpyNode``)."""
    return graph._add_node(
        NodeType.Memcpy,
        deps,
        lambda: PitchedCopyParams.make_pitched(
            dst, src, extent, dst_pos=dst_pos, src_pos=src_pos, kind=kind
        ),
    )


def add_memcpy_node_to_symbol(
    graph: Graph,
    symbol: Any,
    src: Endpoint,
    nbytes: int | None,
    offset: int,
    kind: CopyKind | int | None,
    deps: Deps,
) -> GraphNode:
    """A copy node into a symbol (``hipGraphAddMemcpyNodeToSymbol``)."""
    return graph._add_node(
        NodeType.Memcpy,
        deps,
        lambda: symbol_node_params(
            src,
            "src",
            nbytes,
            lambda: to_symbol_params(symbol, src, nbytes, offset, kind, device=get_device()),
        ),
    )


def add_memcpy_node_from_symbol(
    graph: Graph,
    dst: Endpoint,
    symbol: Any,
    nbytes: int | None,
    offset: int,
    kind: CopyKind | int | None,
    deps: Deps,
) -> GraphNode:
    """A copy node out of a symbol (``hipGraphAddMemcpyNodeFromSymbol``)."""
    return graph._add_node(
        NodeType.Memcpy,
        deps,
        lambda: symbol_node_params(
            dst,
            "dst",
            nbytes,
            lambda: from_symbol_params(dst, symbol, nbytes, offset, kind, device=get_device()),
        ),
    )


class NodeCopySetters:
    """Mixin of :class:`~ahipgraph.GraphNode`: the setters of pitched and symbol copies."""

    __slots__ = ()

    if TYPE_CHECKING:  # GraphNode's own: check the node and its type, then set the parameters

        def _set(self, types: tuple[NodeType, ...], build: Callable[[], NodeParams]) -> None: ...

    def set_memcpy_3d_params(
        self,
        dst: PitchedPtr,
        src: PitchedPtr,
        extent: Triple,
        *,
        dst_pos: Triple = (0, 0, 0),
        src_pos: Triple = (0, 0, 0),
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphMemcpyNodeSetParams``: a pitched copy in the node's own direction."""
        self._set(
            (NodeType.Memcpy,),
            lambda: PitchedCopyParams.make_pitched(
                dst, src, extent, dst_pos=dst_pos, src_pos=src_pos, kind=kind
            ),
        )

    def set_memcpy_to_symbol_params(
        self,
        symbol: SymbolLike,
        src: Endpoint,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphMemcpyNodeSetParamsToSymbol``.

        Raises:
            InvalidSymbol: ``symbol`` is None (checked first, as HIP) or not a symbol.
            InvalidValue: destroyed node, not a memcpy node, a count of 0, a range outside
                the symbol, a direction other than the node's.
        """
        null_symbol(symbol)
        self._set(
            (NodeType.Memcpy,),
            lambda: symbol_node_params(
                src,
                "src",
                nbytes,
                lambda: to_symbol_params(symbol, src, nbytes, offset, kind, device=get_device()),
            ),
        )

    def set_memcpy_from_symbol_params(
        self,
        dst: Endpoint,
        symbol: SymbolLike,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphMemcpyNodeSetParamsFromSymbol``. Raises: as the ``to`` setter."""
        null_symbol(symbol)
        self._set(
            (NodeType.Memcpy,),
            lambda: symbol_node_params(
                dst,
                "dst",
                nbytes,
                lambda: from_symbol_params(dst, symbol, nbytes, offset, kind, device=get_device()),
            ),
        )
