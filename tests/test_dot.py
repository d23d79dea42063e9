"""DOT output in HIP's hipGraphDebugDotPrint shape, file writing, optional Graphviz render."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ahipgraph as ahg
from ahipgraph.lifetime.user_object import INT_MAX
from cleanup import destroy


@ahg.kernel
def saxpy(t: ahg.Threads, n: ahg.int32, a: ahg.float32, x: ahg.Ptr[ahg.float32]) -> None:
    pass


@ahg.kernel(name='odd "name" {x|y}')
def odd(t: ahg.Threads) -> None:
    pass


def noop(*_: Any) -> None:
    pass


NODE_LINE = re.compile(r'^"graph_(\d+)_node_(\d+)"\[style="(\w+)"shape="(\w+)"label="(.*)"\];$')
EDGE_LINE = re.compile(r'^"graph_(\d+)_node_(\d+)" -> "graph_(\d+)_node_(\d+)"$')


def node_lines(text: str) -> dict[int, tuple[str, str, str]]:
    """node id -> (style, shape, label), across all clusters."""
    found = {}
    for line in text.splitlines():
        match = NODE_LINE.match(line)
        if match:
            found[int(match[2])] = (match[3], match[4], match[5])
    return found


def test_layout_of_a_small_graph() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_host_node(noop, deps=[a])
    g = graph.id
    assert graph.to_dot() == (
        "digraph dot {\n"
        f"subgraph cluster_{g} {{\n"
        f'label="graph_{g}"graph[style="dashed"];\n'
        f'"graph_{g}_node_{a.id}"[style="solid"shape="rectangle"label="{a.id}\\nEMPTY"];\n'
        f'"graph_{g}_node_{b.id}"[style="solid"shape="rectangle"label="{b.id}\\nHOST"];\n'
        f'"graph_{g}_node_{a.id}" -> "graph_{g}_node_{b.id}"\n'
        "}\n"
        "}\n"
    )
    destroy(graph)


def test_empty_graph() -> None:
    graph = ahg.Graph()
    assert graph.to_dot().splitlines() == [
        "digraph dot {",
        f"subgraph cluster_{graph.id} {{",
        f'label="graph_{graph.id}"graph[style="dashed"];',
        "}",
        "}",
    ]
    destroy(graph)


def test_labels_and_shapes_per_node_type(device: ahg.Device) -> None:
    buf = device.malloc(1024)
    other = device.malloc(64)
    host = np.zeros(64, dtype=np.uint8)
    event = device.create_event()
    graph = ahg.Graph()
    nodes = {
        "kernel": graph.add_kernel_node(saxpy, 1, 64, (64, 2.0, buf)),
        "h2d": graph.add_memcpy_node(buf, host),
        "d2h": graph.add_memcpy_node(host, buf, 32),
        "d2d": graph.add_memcpy_node(other, buf, 16),
        "memset": graph.add_memset_node(buf, 7, 10, element_size=4, height=2, pitch=64),
        "host": graph.add_host_node(noop),
        "empty": graph.add_empty_node(),
        "record": graph.add_event_record_node(event),
        "wait": graph.add_event_wait_node(event),
        "alloc": graph.add_mem_alloc_node(128),
    }
    nodes["free"] = graph.add_mem_free_node(nodes["alloc"].params.ptr)
    empty = ahg.Graph()
    child = graph.add_child_graph_node(empty)
    lines = node_lines(graph.to_dot())
    expected = {
        "kernel": ("bold", "octagon", "\\nsaxpy\\n"),
        "h2d": ("solid", "trapezium", "\\nMEMCPY\\n(HtoD,64)"),
        "d2h": ("solid", "trapezium", "\\nMEMCPY\\n(DtoH,32)"),
        "d2d": ("solid", "trapezium", "\\nMEMCPY\\n(DtoD,16)"),
        "memset": ("solid", "invtrapezium", "\\nMEMSET\\n(7,80)"),
        "host": ("solid", "rectangle", "\\nHOST"),
        "empty": ("solid", "rectangle", "\\nEMPTY"),
        "record": ("solid", "rectangle", "\\nEVENT_RECORD"),
        "wait": ("solid", "rectangle", "\\nEVENT_WAIT"),
        "alloc": ("solid", "rectangle", "\\nMEM_ALLOC"),
        "free": ("solid", "rectangle", "\\nMEM_FREE"),
    }
    for name, (style, shape, label_tail) in expected.items():
        node = nodes[name]
        assert lines[node.id] == (style, shape, f"{node.id}{label_tail}"), name
    embedded_id = child.params.graph.id
    assert lines[child.id] == ("solid", "rectangle", f"{child.id}\\ngraph_{embedded_id}")
    destroy(buf, other, event, graph, empty)


def test_child_clusters_follow_the_parent_cluster_depth_first() -> None:
    grandchild = ahg.Graph()
    grandchild.add_empty_node()
    child = ahg.Graph()
    child.add_child_graph_node(grandchild)
    parent = ahg.Graph()
    first = parent.add_child_graph_node(child)
    empty = ahg.Graph()
    second = parent.add_child_graph_node(empty, deps=[first])
    text = parent.to_dot()
    lines = text.splitlines()
    starts = [line for line in lines if line.startswith("subgraph cluster_")]
    embedded = first.params.graph
    inner = embedded.nodes()[0].params.graph
    assert starts == [
        f"subgraph cluster_{parent.id} {{",
        f"subgraph cluster_{embedded.id} {{",
        f"subgraph cluster_{inner.id} {{",
        f"subgraph cluster_{second.params.graph.id} {{",
    ]
    # Each cluster closes before the next opens: clusters are never nested in the text.
    depth = 0
    for line in lines[1:-1]:
        depth += line.endswith("{") - (line == "}")
        assert depth in (0, 1)
    assert text.count("subgraph") == 4
    destroy(grandchild, child, parent, empty)


def test_hip_test_substring_counts(device: ahg.Device) -> None:
    # The shape of hip-tests' DOT check: count kinds of nodes and edges by substring.
    buf = device.malloc(256)
    host = np.zeros(256, dtype=np.uint8)
    event = device.create_event()
    child = ahg.Graph()
    child.add_memcpy_node(buf, host)
    graph = ahg.Graph()
    h2d = graph.add_memcpy_node(buf, host)
    d2h = graph.add_memcpy_node(host, buf, deps=[h2d])
    fill = graph.add_memset_node(buf, 0, 256, deps=[d2h])
    graph.add_host_node(noop, deps=[fill])
    graph.add_empty_node()
    graph.add_event_record_node(event)
    graph.add_event_wait_node(event)
    graph.add_child_graph_node(child)
    text = graph.to_dot()
    assert text.count("->") == 3
    assert text.count("MEMCPY") == 3
    assert text.count("MEMSET") == 1
    assert text.count("EMPTY") == 1
    assert text.count("EVENT_WAIT") == 1
    assert text.count("EVENT_RECORD") == 1
    assert text.count("HOST") == 1
    assert text.count("subgraph") == 2
    assert text.count("HtoD") == 2
    assert text.count("DtoH") == 1
    destroy(buf, event, child, graph)


@pytest.mark.parametrize(
    "flags",
    [ahg.DotFlags.Verbose, ahg.DotFlags.KernelNodeParams, ahg.DotFlags.KernelNodeAttributes],
)
def test_verbose_kernel_is_a_record_with_launch_parameters(
    device: ahg.Device, flags: ahg.DotFlags
) -> None:
    buf = device.malloc(256)
    graph = ahg.Graph()
    node = graph.add_kernel_node(saxpy, (2, 1, 1), (32, 2), (64, 2.0, buf), shared_mem=128)
    text = graph.to_dot(flags)
    style, shape, label = node_lines(text)[node.id]
    assert (style, shape) == ("bold", "record")
    assert text.count("KERNEL") == 1
    assert "saxpy\\<\\<\\<(2,1,1),(32,2,1),128\\>\\>\\>" in label
    assert label.startswith("{KERNEL | {")
    assert label.endswith("}")
    destroy(buf, graph)


def test_per_kind_flags_only_expand_their_kind(device: ahg.Device) -> None:
    buf = device.malloc(256)
    host = np.zeros(16, dtype=np.uint8)
    graph = ahg.Graph()
    copy = graph.add_memcpy_node(buf, host)
    fill = graph.add_memset_node(buf, 3, 8)
    shapes = node_lines(graph.to_dot(ahg.DotFlags.MemcpyNodeParams))
    assert shapes[copy.id][1] == "record"
    assert shapes[fill.id][1] == "invtrapezium"
    assert "{kind | HtoD}" in shapes[copy.id][2]
    shapes = node_lines(graph.to_dot(ahg.DotFlags.MemsetNodeParams))
    assert shapes[copy.id][1] == "trapezium"
    assert shapes[fill.id][1] == "record"
    assert "elementSize" in shapes[fill.id][2]
    shapes = node_lines(graph.to_dot(ahg.DotFlags.Verbose))
    assert shapes[copy.id][1] == shapes[fill.id][1] == "record"
    destroy(buf, graph)


def test_verbose_covers_host_event_and_memory_nodes(device: ahg.Device) -> None:
    event = device.create_event()
    graph = ahg.Graph()
    host = graph.add_host_node(noop, (1, 2))
    record = graph.add_event_record_node(event)
    alloc = graph.add_mem_alloc_node(96)
    empty = graph.add_empty_node()
    lines = node_lines(graph.to_dot(ahg.DotFlags.Verbose))
    assert lines[host.id][1] == "record"
    assert "{noop | 2}" in lines[host.id][2]
    assert lines[record.id][1] == "record"
    assert "{{dptr | bytesize | device} | {0x" in lines[alloc.id][2]
    assert lines[empty.id] == ("solid", "rectangle", f"{empty.id}\\nEMPTY")  # nothing to show
    destroy(event, graph)


@pytest.mark.parametrize("flags", [0, 2, 1 << 11, 0x7FF, INT_MAX])
def test_any_flags_value_is_accepted(flags: int) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    assert graph.to_dot(flags).startswith("digraph dot {\n")
    destroy(graph)


def test_names_are_escaped() -> None:
    graph = ahg.Graph()
    node = graph.add_kernel_node(odd, 1, 1)
    label = node_lines(graph.to_dot())[node.id][2]
    assert label == f'{node.id}\\nodd \\"name\\" {{x|y}}\\n'
    verbose = node_lines(graph.to_dot(ahg.DotFlags.Verbose))[node.id][2]
    assert 'odd\\ \\"name\\"' not in verbose  # spaces stay plain
    assert 'odd \\"name\\" \\{x\\|y\\}' in verbose  # record syntax characters are escaped
    destroy(graph)


@settings(max_examples=40, deadline=None)
@given(count=st.integers(min_value=0, max_value=20), data=st.data())
def test_one_line_per_node_and_per_edge(count: int, data: st.DataObject) -> None:
    pairs = [(i, j) for i in range(count) for j in range(i + 1, count)]
    edges = data.draw(st.lists(st.sampled_from(pairs), unique=True, max_size=40)) if pairs else []
    flags = data.draw(st.sampled_from([0, int(ahg.DotFlags.Verbose)]))
    graph = ahg.Graph()
    nodes = [graph.add_host_node(noop) for _ in range(count)]
    if edges:
        graph.add_dependencies([nodes[i] for i, _ in edges], [nodes[j] for _, j in edges])
    lines = graph.to_dot(flags).splitlines()
    assert sum(1 for line in lines if NODE_LINE.match(line)) == count
    edge_lines = [EDGE_LINE.match(line) for line in lines]
    found = sorted((int(m[2]), int(m[4])) for m in edge_lines if m)
    assert found == sorted((nodes[i].id, nodes[j].id) for i, j in edges)
    assert len(lines) == count + len(edges) + 5
    graph.destroy()


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=24),
    piece=st.integers(min_value=1, max_value=9),
    flags=st.sampled_from([0, int(ahg.DotFlags.Verbose), ahg.DotFlags.KernelNodeParams]),
    data=st.data(),
)
def test_text_made_in_pieces_is_the_text_made_line_by_line(
    count: int, piece: int, flags: int, data: st.DataObject
) -> None:
    """A large graph's lines are joined a few thousand at a time: the pieces' seams (inside the
    node lines, inside the edge lines, between a parent and its child clusters) change nothing."""
    from ahipgraph.graph import dot

    pairs = [(i, j) for i in range(count) for j in range(i + 1, count)]
    edges = data.draw(st.lists(st.sampled_from(pairs), unique=True, max_size=30)) if pairs else []
    kernels = data.draw(
        st.lists(st.sampled_from(["saxpy", "odd", "host", "child"]), min_size=count, max_size=count)
    )
    child = ahg.Graph()
    child.add_kernel_node(odd, 1, 1)
    child.add_empty_node()
    graph = ahg.Graph()
    nodes = []
    for kind in kernels:
        if kind == "saxpy":
            nodes.append(graph.add_kernel_node(saxpy, 1, 1, (4, 2.0, None)))
        elif kind == "odd":
            nodes.append(graph.add_kernel_node(odd, 1, 1))
        elif kind == "host":
            nodes.append(graph.add_host_node(noop))
        else:
            nodes.append(graph.add_child_graph_node(child))
    if edges:
        graph.add_dependencies([nodes[i] for i, _ in edges], [nodes[j] for _, j in edges])
    whole = dot.LINES_PER_PIECE
    try:
        dot.LINES_PER_PIECE = piece
        in_pieces = graph.to_dot(flags)
    finally:
        dot.LINES_PER_PIECE = whole
    assert in_pieces == graph.to_dot(flags)
    lines = in_pieces.splitlines()
    own = [line for line in lines if line.startswith(f'"graph_{graph.id}_node_')]
    assert [int(NODE_LINE.match(line)[2]) for line in own[:count]] == [n.id for n in nodes]
    expected = [(a.id, b.id) for a in nodes for b in a.dependents()]
    assert [(int(m[2]), int(m[4])) for m in map(EDGE_LINE.match, own[count:])] == expected
    assert in_pieces.endswith("}\n")
    assert not in_pieces.endswith("\n\n")
    destroy(graph, child)


def test_flags_as_int_or_as_dot_flags_draw_the_same(device: ahg.Device) -> None:
    graph = ahg.Graph()
    x = device.malloc(16)
    graph.add_kernel_node(saxpy, 1, 1, (4, 2.0, x), priority=1)
    graph.add_memset_node(x, 0, 16)
    graph.add_host_node(noop)
    for flags in ahg.DotFlags:
        assert graph.to_dot(flags) == graph.to_dot(int(flags))
    every = ahg.DotFlags.KernelNodeAttributes | ahg.DotFlags.Handles
    assert graph.to_dot(every) == graph.to_dot(int(every))
    destroy(graph)
    device.free(x)


# -- debug_dot_print and render ------------------------------------------------------------------


def test_debug_dot_print_writes_the_dot_text(tmp_path: Path) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    path = tmp_path / "graph.dot"
    graph.debug_dot_print(path, ahg.DotFlags.Verbose)
    assert path.read_text() == graph.to_dot(ahg.DotFlags.Verbose)
    graph.debug_dot_print(str(path))
    assert path.read_text() == graph.to_dot()
    destroy(graph)


@pytest.mark.parametrize("where", ["directory", "empty", "missing_dir"])
def test_unopenable_path_is_operating_system(tmp_path: Path, where: str) -> None:
    graph = ahg.Graph()
    path = {"directory": str(tmp_path), "empty": "", "missing_dir": str(tmp_path / "no" / "x")}
    with pytest.raises(ahg.OperatingSystem):
        graph.debug_dot_print(path[where])
    destroy(graph)


def test_null_path_or_destroyed_graph_is_invalid_value(tmp_path: Path) -> None:
    graph = ahg.Graph()
    with pytest.raises(ahg.InvalidValue):
        graph.debug_dot_print(None)  # type: ignore[arg-type]
    graph.destroy()
    with pytest.raises(ahg.InvalidValue):
        graph.debug_dot_print(tmp_path / "x.dot")
    assert not (tmp_path / "x.dot").exists()


def test_render_without_graphviz_is_not_supported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing named dot in here
    graph = ahg.Graph()
    with pytest.raises(ahg.NotSupported):
        graph.render(tmp_path / "g.svg")
    with pytest.raises(ValueError, match="format"):
        graph.render(tmp_path / "g.svg", format="svg -o /etc/passwd")
    destroy(graph)


NO_GRAPHVIZ = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")


@NO_GRAPHVIZ
@pytest.mark.parametrize("flags", [0, *ahg.DotFlags, INT_MAX])
def test_graphviz_accepts_the_output_for_every_node_kind(
    device: ahg.Device, tmp_path: Path, flags: int
) -> None:
    buf = device.malloc(1024)
    host = np.zeros(64, dtype=np.uint8)
    graph = ahg.Graph()
    a = graph.add_kernel_node(odd, 1, 1)
    b = graph.add_memcpy_node(buf, host, deps=[a])
    c = graph.add_memset_node(buf, 3, 4, deps=[a])
    graph.add_host_node(noop, deps=[b, c])
    graph.add_event_record_node(device.create_event())
    graph.add_event_wait_node(device.create_event())
    graph.add_child_graph_node(graph, deps=[c])
    alloc = graph.add_mem_alloc_node(64, deps=[b, c])
    graph.add_mem_free_node(alloc.params.ptr, deps=[alloc])
    out = tmp_path / "graph.svg"
    graph.render(out, "svg", flags)  # dot rejects a malformed label with an error
    assert out.read_text().count('class="node"') == 9 + 6  # the parent's, the copy's


@NO_GRAPHVIZ
@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_render_with_graphviz(tmp_path: Path, fmt: str) -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    graph.add_child_graph_node(graph, deps=[a])
    out = tmp_path / f"graph.{fmt}"
    graph.render(out, fmt, ahg.DotFlags.Verbose)
    assert out.stat().st_size > 0
