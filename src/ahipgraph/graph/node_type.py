"""Graph node types, with HIP's names and numbers (``hipGraphNodeType``).

The numbering is HIP's, so a value printed by ahipgraph means the same as one printed by HIP.
Eleven kinds can be created here (see :data:`CREATABLE_NODE_TYPES`): external semaphores have
nothing to signal on a simulated device, and HIP's own symbol-copy nodes report ``Memcpy``.
"""

from __future__ import annotations

import enum

__all__ = ["CREATABLE_NODE_TYPES", "NodeType", "a_node_of_type"]


class NodeType(enum.IntEnum):
    """``hipGraphNodeType`` (without the ``hipGraphNodeType`` prefix)."""

    Kernel = 0
    Memcpy = 1
    Memset = 2
    Host = 3
    Graph = 4
    Empty = 5
    WaitEvent = 6
    EventRecord = 7
    ExtSemaphoreSignal = 8
    ExtSemaphoreWait = 9
    MemAlloc = 10
    MemFree = 11
    MemcpyFromSymbol = 12
    MemcpyToSymbol = 13
    Conditional = 15  # HIP's value (14 is unused)
    # Earlier spellings, kept as aliases (the DOT flags' ``ExtSemas...`` prefix is HIP's own):
    ExtSemasSignal = 8
    ExtSemasWait = 9

    @property
    def hip_name(self) -> str:
        """The C enumerator, e.g. ``hipGraphNodeTypeKernel``."""
        return f"hipGraphNodeType{self.name}"


CREATABLE_NODE_TYPES = frozenset(NodeType) - {
    NodeType.ExtSemaphoreSignal,
    NodeType.ExtSemaphoreWait,
    NodeType.MemcpyFromSymbol,
    NodeType.MemcpyToSymbol,
}
"""The node types a graph can hold."""


def a_node_of_type(node_type: NodeType) -> str:
    """``"a Kernel node"``, ``"an Empty node"``: a node type in a message, with its article."""
    article = "an" if node_type.name[0] in "AEIOU" else "a"
    return f"{article} {node_type.name} node"
