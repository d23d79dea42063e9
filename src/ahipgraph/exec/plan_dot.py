"""Graphviz DOT view of an executable's plan: segments, parallel strands and the sync plan.

A graph's own DOT (``graph.to_dot()``) shows what the user built; this shows what instantiate
made of it, which is what decides the timeline:

* one cluster per strand (strand 0 is the launch stream), its segments top to bottom in dispatch
  order, joined by grey "then" edges;
* one box per segment, labelled with its id, level and nodes (kernel names where known; a node
  disabled with ``exec.set_node_enabled`` is marked ``(disabled)``: it keeps its place and the
  ordering, and does no work);
* a red dashed edge for every cross-strand wait the sync plan kept, labelled with the signal
  index — deduplicated waits do not appear, so the picture shows exactly the signals a launch
  uses;
* a ``join`` box at the end of strand 0 with a blue edge from every segment it waits for.

Pure: reads a :class:`Plan` and an :class:`ExecGraph`, returns text. Identifiers are plan
indices, so the same graph always gives the same text.
"""

from __future__ import annotations

import itertools

from ..graph.node_type import NodeType
from .planner import Plan
from .snapshot import ExecGraph, ExecNode

__all__ = ["plan_to_dot"]


def _node_label(node: ExecNode) -> str:
    name = node.params.kernel.name if node.type is NodeType.Kernel else node.type.name
    # A disabled node keeps its place (and its segment's signals) but does no work.
    return f"{node.index}: {name}" if node.enabled else f"{node.index}: {name} (disabled)"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def plan_to_dot(graph: ExecGraph, plan: Plan, *, name: str = "plan") -> str:
    """The DOT text of ``plan`` for ``graph``."""
    lines = [f'digraph "{_escape(name)}" {{', "  rankdir=TB;", "  node [shape=box];"]
    for strand, segment_ids in enumerate(plan.strands):
        title = "strand 0 (launch stream)" if strand == 0 else f"strand {strand}"
        lines.append(f"  subgraph cluster_strand_{strand} {{")
        lines.append(f'    label="{title}"; style="rounded";')
        for segment_id in segment_ids:
            segment = plan.segments[segment_id]
            nodes = "\\n".join(_escape(_node_label(graph.nodes[i])) for i in segment.nodes)
            signal = "" if segment.signal is None else f"\\nsignals {segment.signal}"
            lines.append(
                f'    seg{segment_id} [label="segment {segment_id} (level {segment.level})'
                f'\\n{nodes}{signal}"];'
            )
        if strand == 0 and plan.final_waits:
            lines.append('    join [label="join" shape=ellipse];')
        lines.append("  }")
    for segment_ids in plan.strands:
        for before, after in itertools.pairwise(segment_ids):
            lines.append(f'  seg{before} -> seg{after} [color="grey"];')
    if plan.final_waits and plan.strands[0]:
        lines.append(f'  seg{plan.strands[0][-1]} -> join [color="grey"];')
    for segment in plan.segments:
        for producer in segment.waits:
            index = plan.segments[producer].signal
            lines.append(
                f'  seg{producer} -> seg{segment.id} [color="red" style="dashed" '
                f'label="signal {index}"];'
            )
    for producer in plan.final_waits:
        index = plan.segments[producer].signal
        lines.append(f'  seg{producer} -> join [color="blue" label="signal {index}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
