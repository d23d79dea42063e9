"""Kernel-node attributes on graph nodes (``hipGraphKernelNode{Get,Set,Copy}Attribute``).

The values and HIP's checks live in :mod:`ahipgraph.runtime.launch_attributes`; the attributes
are stored in the node's :class:`KernelParams`, so clones, child-graph copies, executables and
``exec.update`` carry them. Every call checks in HIP's order — the node handle, then its type
(only kernel nodes have attributes: anything else is ``InvalidValue``), then the attribute id,
then the value — under the graph's lock, and a failed call changes nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..core.errors import InvalidValue
from ..runtime.launch_attributes import (
    AttributeValue,
    KernelNodeAttribute,
    attribute_of,
    check_attribute_id,
    check_attribute_value,
    with_attribute,
)
from .node_type import NodeType

if TYPE_CHECKING:
    from .node import GraphNode

__all__ = ["copy_attributes", "get_attribute", "set_attribute"]


def _kernel_node(node: GraphNode) -> None:
    node._check_alive()
    if node._type is not NodeType.Kernel:
        raise InvalidValue(f"{node!r} is not a kernel node; only kernel nodes have attributes")


def get_attribute(node: GraphNode, attr: KernelNodeAttribute | int) -> AttributeValue:
    """The node's value of ``attr`` (an int, a bool or an :class:`AccessPolicyWindow`)."""
    with node.graph.lock:
        _kernel_node(node)
        params: Any = node._params  # a kernel node's: KernelParams
        return attribute_of(params, check_attribute_id(attr))


def set_attribute(node: GraphNode, attr: KernelNodeAttribute | int, value: Any) -> None:
    """Set ``attr`` on a kernel node; see :mod:`ahipgraph.runtime.launch_attributes`."""
    with node.graph.lock:
        _kernel_node(node)
        checked_attr = check_attribute_id(attr)
        if value is None:
            raise InvalidValue(f"a value for {checked_attr.name} is required (null)")
        checked = check_attribute_value(checked_attr, value)
        node._check_alive()  # the value's conversion may run user code that destroyed it
        node._params = with_attribute(node._params, checked_attr, checked)


def copy_attributes(dst: GraphNode, src: GraphNode) -> None:
    """Give ``dst`` every attribute of ``src`` (``hipGraphKernelNodeCopyAttributes``).

    Both must be kernel nodes (``InvalidValue`` otherwise); they may belong to different
    graphs, as in HIP (whose ``CopyAttr`` compares no graphs) and CUDA (which asks only for
    one context). The source's attributes are read under its graph's lock and written under
    the destination's, one lock at a time: two graphs' locks are never held together.
    """
    from .node import live_node

    dst = live_node(dst, "destination node")
    src = live_node(src, "source node")
    with src.graph.lock:
        _kernel_node(src)
        source: Any = src._params
    with dst.graph.lock:
        _kernel_node(dst)
        target: Any = dst._params
        dst._params = replace(target, priority=source.priority, attributes=source.attributes)


def exec_attribute(params: Any, attr: KernelNodeAttribute | int) -> AttributeValue:
    """The value of ``attr`` in an executable's copy of a kernel node."""
    return attribute_of(params, check_attribute_id(attr))


def exec_with_attribute(params: Any, attr: KernelNodeAttribute | int, value: Any) -> Any:
    """An executable's kernel parameters with ``attr`` changed.

    An executable may change the priority and the access-policy window (hints that need no new
    command); whether the kernel is launched cooperatively was fixed at instantiate, so a
    different cooperative value is ``InvalidValue``.
    """
    checked_attr = check_attribute_id(attr)
    if value is None:
        raise InvalidValue(f"a value for {checked_attr.name} is required (null)")
    checked = check_attribute_value(checked_attr, value)
    if checked_attr is KernelNodeAttribute.Cooperative and checked != params.attributes.cooperative:
        raise InvalidValue("an executable cannot change whether a kernel node is cooperative")
    return with_attribute(params, checked_attr, checked)
