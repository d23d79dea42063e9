"""Pitched (3D) and symbol memcpy nodes: the ``Graph`` adds and the ``GraphNode`` setters.

``hipGraphAddMemcpyNode`` (with ``hipMemcpy3DParms``), ``hipGraphAddMemcpyNodeToSymbol`` and
``hipGraphAddMemcpyNodeFromSymbol`` and their ``hipGraphMemcpyNodeSetParams*`` twins. Every
node made here is a ``Memcpy`` node (HIP's symbol nodes report ``Memcpy`` too), validated by
the builders streams use (:mod:`ahipgraph.runtime.pitched`, :mod:`ahipgraph.runtime.stream_copies`);
a symbol is resolved on the calling task's current device when the node is made, as HIP
resolves it for the node's device. The direction of a memcpy node is fixed once it is made.
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

if TYPE_CHECKING:
    from .builder import Deps
    from .node import GraphNode
    from .params import NodeParams

__all__ = ["GraphCopyBuilder", "NodeCopySetters"]

Triple = tuple[int, int, int]


class GraphCopyBuilder:
    """Mixin of :class:`~ahipgraph.Graph`: pitched and symbol memcpy nodes."""

    __slots__ = ()

    def _add_node(
        self, node_type: NodeType, deps: Deps, build: Callable[[], NodeParams]
    ) -> GraphNode:
        raise NotImplementedError

    def add_memcpy_3d_node(
        self,
        dst: PitchedPtr,
        src: PitchedPtr,
        extent: Triple,
        *,
        dst_pos: Triple = (0, 0, 0),
        src_pos: Triple = (0, 0, 0),
        kind: CopyKind | int | None = None,
        deps: Deps = (),
    ) -> GraphNode:
        """Add a pitched copy of ``extent`` = (width bytes, height rows, depth slices)
        (``hipGraphAddMemcpyNode``); a 2D copy is a depth of 1.

        Raises:
            InvalidValue: destroyed graph, bad deps, a null endpoint, a pitch above the
                current device's ``max_pitch``, a region out of bounds.
            InvalidPitchValue: a pitch below the width. InvalidMemcpyDirection: a bad kind.
        """
        return self._add_node(
            NodeType.Memcpy,
            deps,
            lambda: PitchedCopyParams.make_pitched(
                dst, src, extent, dst_pos=dst_pos, src_pos=src_pos, kind=kind
            ),
        )

    def add_memcpy_node_to_symbol(
        self,
        symbol: Any,
        src: Endpoint,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
        *,
        deps: Deps = (),
    ) -> GraphNode:
        """Add a copy into ``symbol`` at ``offset`` (``hipGraphAddMemcpyNodeToSymbol``).

        Raises:
            InvalidSymbol: not a declared symbol. InvalidValue: destroyed graph, bad deps,
                ``offset + nbytes`` past the symbol. InvalidMemcpyDirection: a bad kind.
        """
        return self._add_node(
            NodeType.Memcpy,
            deps,
            lambda: to_symbol_params(symbol, src, nbytes, offset, kind, device=get_device()),
        )

    def add_memcpy_node_from_symbol(
        self,
        dst: Endpoint,
        symbol: Any,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
        *,
        deps: Deps = (),
    ) -> GraphNode:
        """Add a copy out of ``symbol`` at ``offset`` (``hipGraphAddMemcpyNodeFromSymbol``).

        Raises: as :meth:`add_memcpy_node_to_symbol`.
        """
        return self._add_node(
            NodeType.Memcpy,
            deps,
            lambda: from_symbol_params(dst, symbol, nbytes, offset, kind, device=get_device()),
        )


class NodeCopySetters:
    """Mixin of :class:`~ahipgraph.GraphNode`: the setters of pitched and symbol copies."""

    __slots__ = ()

    def _set(self, types: tuple[NodeType, ...], build: Callable[[], NodeParams]) -> None:
        raise NotImplementedError

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
        symbol: Any,
        src: Endpoint,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphMemcpyNodeSetParamsToSymbol``."""
        self._set(
            (NodeType.Memcpy,),
            lambda: to_symbol_params(symbol, src, nbytes, offset, kind, device=get_device()),
        )

    def set_memcpy_from_symbol_params(
        self,
        dst: Endpoint,
        symbol: Any,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphMemcpyNodeSetParamsFromSymbol``."""
        self._set(
            (NodeType.Memcpy,),
            lambda: from_symbol_params(dst, symbol, nbytes, offset, kind, device=get_device()),
        )
