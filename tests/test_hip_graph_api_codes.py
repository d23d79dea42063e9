"""HIP's graph API, function by function: each negative case answers with HIP's code.

The cases follow ``hip_graph.cpp``'s checks and the negative tests of hip-tests
(``catch/unit/graph``): a null argument, a destroyed or foreign handle, a node of the wrong
type, a bad parameter value, bad flags. Where HIP checks nothing and would crash (a destroyed
handle most calls take without ``isValid``), the answer is the one HIP gives a bad handle,
InvalidValue. Every refused call changes nothing: the graph's and the executable's
statistics are the same after it as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy

T = ahg.NodeType
A = ahg.KernelNodeAttribute


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


@dataclass
class World:
    """One graph with a node of each common type, its executable, and the bad handles."""

    device: ahg.Device
    ptr: ahg.DevicePtr
    event: ahg.Event
    graph: ahg.Graph
    kernel: ahg.GraphNode
    memcpy: ahg.GraphNode
    memset: ahg.GraphNode
    host: ahg.GraphNode
    child: ahg.GraphNode
    record: ahg.GraphNode
    wait: ahg.GraphNode
    exec: ahg.GraphExec
    late: ahg.GraphNode  # added after the executable was made
    foreign: ahg.GraphNode  # a node of another graph
    other: ahg.Graph
    dead_graph: ahg.Graph
    dead_node: ahg.GraphNode
    dead_exec: ahg.GraphExec
    mem_graph: ahg.Graph
    alloc: ahg.GraphNode
    cyclic: ahg.Graph
    user_object: ahg.UserObject

    def stats(self) -> tuple[Any, ...]:
        return (self.graph.statistics(), self.exec.statistics(), self.other.statistics())


@pytest.fixture
def world(device: ahg.Device) -> Iterator[World]:
    ptr = device.malloc(64)
    event = device.create_event()
    graph = ahg.Graph()
    kernel = graph.add_kernel_node(put, 1, 1, [1, ptr])
    memcpy = graph.add_memcpy_node(ptr + 8, ptr, 8, deps=[kernel])
    memset = graph.add_memset_node(ptr + 16, 0, 8)
    host = graph.add_host_node(print, ())
    inner = ahg.Graph()
    inner.add_empty_node()
    child = graph.add_child_graph_node(inner)
    record = graph.add_event_record_node(event)
    wait = graph.add_event_wait_node(event)
    graph_exec = graph.instantiate()
    late = graph.add_empty_node()
    other = ahg.Graph()
    foreign = other.add_kernel_node(put, 1, 1, [2, ptr])
    dead_graph = ahg.Graph()
    dead_graph.destroy()
    dead_node = graph.add_empty_node()
    dead_node.destroy()
    dead_exec = other.instantiate()
    dead_exec.destroy()
    mem_graph = ahg.Graph()
    alloc = mem_graph.add_mem_alloc_node(64)
    mem_graph.add_mem_free_node(alloc.params.ptr, deps=[alloc])
    mem_graph.instantiate().destroy()
    cyclic = ahg.Graph()
    a = cyclic.add_empty_node()
    b = cyclic.add_empty_node(deps=[a])
    cyclic.add_dependencies(b, a)
    user_object = ahg.UserObject(lambda data: None)
    yield World(
        device, ptr, event, graph, kernel, memcpy, memset, host, child, record, wait,
        graph_exec, late, foreign, other, dead_graph, dead_node, dead_exec, mem_graph, alloc,
        cyclic, user_object,
    )  # fmt: skip
    destroy(graph_exec, graph, inner, other, mem_graph, cyclic, event, user_object, ptr)


Case = tuple[str, Callable[[World], object], type[BaseException]]

CASES: list[Case] = [
    # hipGraphDestroy / hipGraphClone / hipGraphNodeFindInClone
    ("Destroy twice", lambda w: w.dead_graph.destroy(), ahg.IllegalState),
    ("Clone destroyed", lambda w: w.dead_graph.clone(), ahg.InvalidValue),
    ("Clone with memory nodes", lambda w: w.mem_graph.clone(), ahg.NotSupported),
    ("FindInClone null node", lambda w: w.other.find_in_clone(None), ahg.InvalidValue),
    ("FindInClone not a clone", lambda w: w.other.find_in_clone(w.kernel), ahg.InvalidValue),
    ("FindInClone destroyed node", lambda w: w.graph.find_in_clone(w.dead_node), ahg.InvalidValue),
    # hipGraphAdd*Node: the graph, the dependencies, the parameters
    (
        "AddKernelNode destroyed graph",
        lambda w: w.dead_graph.add_kernel_node(put, 1, 1, [1, w.ptr]),
        ahg.InvalidValue,
    ),
    (
        "AddKernelNode null func",
        lambda w: w.graph.add_kernel_node(None, 1, 1, []),
        ahg.InvalidValue,
    ),
    (
        "AddKernelNode grid 0",
        lambda w: w.graph.add_kernel_node(put, 0, 1, [1, w.ptr]),
        ahg.InvalidConfiguration,
    ),
    (
        "AddKernelNode block too big",
        lambda w: w.graph.add_kernel_node(put, 1, 4096, [1, w.ptr]),
        ahg.InvalidConfiguration,
    ),
    (
        "AddKernelNode shared memory",
        lambda w: w.graph.add_kernel_node(put, 1, 1, [1, w.ptr], shared_mem=1 << 30),
        ahg.InvalidValue,
    ),
    (
        "Add foreign dependency",
        lambda w: w.graph.add_empty_node(deps=[w.foreign]),
        ahg.InvalidValue,
    ),
    (
        "Add destroyed dependency",
        lambda w: w.graph.add_empty_node(deps=[w.dead_node]),
        ahg.InvalidValue,
    ),
    ("Add null dependency", lambda w: w.graph.add_empty_node(deps=[None]), ahg.InvalidValue),
    (
        "Add duplicate dependency",
        lambda w: w.graph.add_empty_node(deps=[w.kernel, w.kernel]),
        ahg.InvalidValue,
    ),
    (
        "AddMemcpyNode1D count 0",
        lambda w: w.graph.add_memcpy_node(w.ptr + 8, w.ptr, 0),
        ahg.InvalidValue,
    ),
    (
        "AddMemcpyNode1D null dst",
        lambda w: w.graph.add_memcpy_node(ahg.NULL, w.ptr, 8),
        ahg.InvalidValue,
    ),
    (
        "AddMemsetNode element size 3",
        lambda w: w.graph.add_memset_node(w.ptr, 0, 4, element_size=3),
        ahg.InvalidValue,
    ),
    (
        "AddMemsetNode height 0",
        lambda w: w.graph.add_memset_node(w.ptr, 0, 4, height=0),
        ahg.InvalidValue,
    ),
    (
        "AddMemsetNode pitch below width",
        lambda w: w.graph.add_memset_node(w.ptr, 0, 8, height=2, pitch=4),
        ahg.InvalidValue,
    ),
    ("AddHostNode null fn", lambda w: w.graph.add_host_node(None), ahg.InvalidValue),
    ("AddChildGraphNode null", lambda w: w.graph.add_child_graph_node(None), ahg.InvalidValue),
    (
        "AddChildGraphNode destroyed",
        lambda w: w.graph.add_child_graph_node(w.dead_graph),
        ahg.InvalidValue,
    ),
    (
        "AddChildGraphNode memory nodes",
        lambda w: w.graph.add_child_graph_node(w.mem_graph),
        ahg.NotSupported,
    ),
    ("AddEventRecordNode null", lambda w: w.graph.add_event_record_node(None), ahg.InvalidValue),
    ("AddEventWaitNode null", lambda w: w.graph.add_event_wait_node(None), ahg.InvalidValue),
    ("AddMemAllocNode 0 bytes", lambda w: w.graph.add_mem_alloc_node(0), ahg.InvalidValue),
    (
        "AddMemAllocNode no such device",
        lambda w: w.graph.add_mem_alloc_node(8, device=7),
        ahg.InvalidValue,
    ),
    ("AddMemFreeNode null", lambda w: w.graph.add_mem_free_node(None), ahg.InvalidValue),
    (
        "AddMemFreeNode not allocated by a node",
        lambda w: w.graph.add_mem_free_node(w.ptr),
        ahg.InvalidValue,
    ),
    (
        "AddMemFreeNode freed twice",
        lambda w: w.graph.add_mem_free_node(w.alloc.params.ptr),
        ahg.InvalidValue,
    ),
    (
        "AddNode memcpy count 0",
        lambda w: w.graph.add_node(
            ahg.GraphNodeParams(T.Memcpy, ahg.MemcpyParams.make(w.ptr + 8, w.ptr, 0))
        ),
        ahg.InvalidValue,
    ),
    # hipGraphAddDependencies / RemoveDependencies / GetNodes
    (
        "AddDependencies self",
        lambda w: w.graph.add_dependencies(w.kernel, w.kernel),
        ahg.InvalidValue,
    ),
    (
        "AddDependencies foreign",
        lambda w: w.graph.add_dependencies(w.foreign, w.kernel),
        ahg.InvalidValue,
    ),
    ("AddDependencies null", lambda w: w.graph.add_dependencies(None, w.kernel), ahg.InvalidValue),
    (
        "AddDependencies existing edge",
        lambda w: w.graph.add_dependencies(w.kernel, w.memcpy),
        ahg.InvalidValue,
    ),
    (
        "AddDependencies destroyed graph",
        lambda w: w.dead_graph.add_dependencies([], []),
        ahg.InvalidValue,
    ),
    (
        "RemoveDependencies no such edge",
        lambda w: w.graph.remove_dependencies(w.memcpy, w.kernel),
        ahg.InvalidValue,
    ),
    (
        "RemoveDependencies foreign",
        lambda w: w.graph.remove_dependencies(w.foreign, w.kernel),
        ahg.InvalidValue,
    ),
    ("GetNodes cycle", lambda w: w.cyclic.nodes(), ahg.InvalidValue),
    ("GetRootNodes destroyed", lambda w: w.dead_graph.root_nodes(), ahg.InvalidValue),
    ("GetEdges destroyed", lambda w: w.dead_graph.edges(), ahg.InvalidValue),
    # node queries and hipGraphDestroyNode
    ("NodeGetType destroyed", lambda w: w.dead_node.type, ahg.InvalidValue),
    ("NodeGetDependencies destroyed", lambda w: w.dead_node.dependencies(), ahg.InvalidValue),
    ("NodeGetDependentNodes destroyed", lambda w: w.dead_node.dependents(), ahg.InvalidValue),
    ("DestroyNode twice", lambda w: w.dead_node.destroy(), ahg.InvalidValue),
    ("DestroyNode memory alloc", lambda w: w.alloc.destroy(), ahg.NotSupported),
    # node setters and attributes
    (
        "KernelNodeSetParams wrong type",
        lambda w: w.memcpy.set_kernel_params(put, 1, 1, [1, w.ptr]),
        ahg.InvalidValue,
    ),
    (
        "KernelNodeSetParams null func",
        lambda w: w.kernel.set_kernel_params(None, 1, 1, []),
        ahg.InvalidValue,
    ),
    (
        "KernelNodeGetAttribute wrong type",
        lambda w: w.memcpy.get_attribute(A.Priority),
        ahg.InvalidValue,
    ),
    ("KernelNodeGetAttribute unknown id", lambda w: w.kernel.get_attribute(5), ahg.InvalidValue),
    (
        "KernelNodeSetAttribute null value",
        lambda w: w.kernel.set_attribute(A.Priority, None),
        ahg.InvalidValue,
    ),
    (
        "KernelNodeCopyAttributes null",
        lambda w: w.kernel.copy_attributes_from(None),
        ahg.InvalidValue,
    ),
    (
        "KernelNodeCopyAttributes wrong type",
        lambda w: w.kernel.copy_attributes_from(w.memset),
        ahg.InvalidValue,
    ),
    (
        "MemcpyNodeSetParams1D count 0",
        lambda w: w.memcpy.set_memcpy_params(w.ptr + 8, w.ptr, 0),
        ahg.InvalidValue,
    ),
    (
        "MemcpyNodeSetParams1D src is dst",
        lambda w: w.memcpy.set_memcpy_params(w.ptr, w.ptr, 8),
        ahg.InvalidValue,
    ),
    (
        "MemcpyNodeSetParams1D direction",
        lambda w: w.memcpy.set_memcpy_params(np.zeros(8, np.uint8), w.ptr, 8),
        ahg.InvalidValue,
    ),
    (
        "MemsetNodeSetParams pitch below width",
        lambda w: w.memset.set_memset_params(w.ptr, 0, 8, height=2, pitch=4),
        ahg.InvalidValue,
    ),
    ("HostNodeSetParams null fn", lambda w: w.host.set_host_params(None), ahg.InvalidValue),
    ("EventRecordNodeSetEvent null", lambda w: w.record.set_event(None), ahg.InvalidValue),
    ("EventNodeSetEvent wrong type", lambda w: w.kernel.set_event(w.event), ahg.InvalidValue),
    ("NodeSetParams memory alloc", lambda w: w.alloc.set_params(w.alloc.params), ahg.NotSupported),
    # hipGraphInstantiateWithFlags
    ("Instantiate destroyed graph", lambda w: w.dead_graph.instantiate(), ahg.InvalidValue),
    ("Instantiate cycle", lambda w: w.cyclic.instantiate(), ahg.InvalidValue),
    ("Instantiate combined flags", lambda w: w.other.instantiate(3), ahg.InvalidValue),
    ("Instantiate unknown flag", lambda w: w.other.instantiate(16), ahg.InvalidValue),
    (
        "Instantiate device launch",
        lambda w: w.other.instantiate(ahg.InstantiateFlags.DEVICE_LAUNCH),
        ahg.NotSupported,
    ),
    ("Instantiate memory nodes twice", lambda w: w.mem_graph.instantiate(), ahg.NotSupported),
    # hipGraphExec*NodeSetParams: the executable, the node, its type, the parameters
    (
        "ExecKernelNodeSetParams destroyed exec",
        lambda w: w.dead_exec.set_kernel_node_params(w.foreign, put, 1, 1, [1, w.ptr]),
        ahg.InvalidValue,
    ),
    (
        "ExecKernelNodeSetParams null node",
        lambda w: w.exec.set_kernel_node_params(None, put, 1, 1, [1, w.ptr]),
        ahg.InvalidValue,
    ),
    (
        "ExecKernelNodeSetParams destroyed node",
        lambda w: w.exec.set_kernel_node_params(w.dead_node, put, 1, 1, [1, w.ptr]),
        ahg.InvalidValue,
    ),
    (
        "ExecKernelNodeSetParams foreign node",
        lambda w: w.exec.set_kernel_node_params(w.foreign, put, 1, 1, [1, w.ptr]),
        ahg.InvalidValue,
    ),
    (
        "ExecKernelNodeSetParams node added later",
        lambda w: w.exec.set_kernel_node_params(w.late, put, 1, 1, [1, w.ptr]),
        ahg.InvalidValue,
    ),
    (
        "ExecKernelNodeSetParams embedded node",
        lambda w: w.exec.set_kernel_node_params(
            w.child.get_child_graph().nodes()[0], put, 1, 1, [1, w.ptr]
        ),
        ahg.InvalidValue,
    ),
    (
        "ExecKernelNodeSetParams wrong type",
        lambda w: w.exec.set_kernel_node_params(w.memcpy, put, 1, 1, [1, w.ptr]),
        ahg.InvalidValue,
    ),
    (
        "ExecKernelNodeSetParams null func",
        lambda w: w.exec.set_kernel_node_params(w.kernel, None, 1, 1, []),
        ahg.InvalidValue,
    ),
    (
        "ExecKernelNodeSetParams configuration",
        lambda w: w.exec.set_kernel_node_params(w.kernel, put, 1, 4096, [1, w.ptr]),
        ahg.InvalidConfiguration,
    ),
    (
        "ExecMemcpyNodeSetParams1D direction",
        lambda w: w.exec.set_memcpy_node_params(w.memcpy, np.zeros(8, np.uint8), w.ptr, 8),
        ahg.InvalidValue,
    ),
    (
        "ExecMemcpyNodeSetParams1D count 0",
        lambda w: w.exec.set_memcpy_node_params(w.memcpy, w.ptr + 8, w.ptr, 0),
        ahg.InvalidValue,
    ),
    (
        "ExecMemsetNodeSetParams null dst",
        lambda w: w.exec.set_memset_node_params(w.memset, ahg.NULL, 0, 8),
        ahg.InvalidValue,
    ),
    (
        "ExecHostNodeSetParams null fn",
        lambda w: w.exec.set_host_node_params(w.host, None),
        ahg.InvalidValue,
    ),
    (
        "ExecEventRecordNodeSetEvent wait node",
        lambda w: w.exec.set_event_record_node_event(w.wait, w.event),
        ahg.InvalidValue,
    ),
    (
        "ExecEventWaitNodeSetEvent null event",
        lambda w: w.exec.set_event_wait_node_event(w.wait, None),
        ahg.InvalidValue,
    ),
    (
        "ExecChildGraphNodeSetParams wrong type",
        lambda w: w.exec.set_child_graph_node_params(w.kernel, w.other),
        ahg.InvalidValue,
    ),
    (
        "ExecChildGraphNodeSetParams other topology",
        lambda w: w.exec.set_child_graph_node_params(w.child, w.other),
        ahg.Unknown,
    ),
    (
        "ExecChildGraphNodeSetParams own graph",
        lambda w: w.exec.set_child_graph_node_params(w.child, w.graph),
        ahg.Unknown,
    ),
    (
        "ExecNodeSetParams another kind",
        lambda w: w.exec.set_node_params(w.kernel, ahg.GraphNodeParams(T.MemAlloc, w.alloc.params)),
        ahg.InvalidValue,
    ),
    # hipGraphNodeSetEnabled / GetEnabled
    (
        "NodeSetEnabled destroyed exec",
        lambda w: w.dead_exec.set_node_enabled(w.foreign, False),
        ahg.InvalidValue,
    ),
    (
        "NodeSetEnabled host node",
        lambda w: w.exec.set_node_enabled(w.host, False),
        ahg.InvalidValue,
    ),
    (
        "NodeSetEnabled child node",
        lambda w: w.exec.set_node_enabled(w.child, False),
        ahg.InvalidValue,
    ),
    (
        "NodeSetEnabled foreign node",
        lambda w: w.exec.set_node_enabled(w.foreign, False),
        ahg.InvalidValue,
    ),
    ("NodeGetEnabled event node", lambda w: w.exec.node_enabled(w.record), ahg.InvalidValue),
    ("NodeGetEnabled node added later", lambda w: w.exec.node_enabled(w.late), ahg.InvalidValue),
    # hipGraphExecUpdate / hipGraphExecDestroy
    ("ExecUpdate null graph", lambda w: w.exec.update(None), ahg.InvalidValue),
    ("ExecUpdate destroyed graph", lambda w: w.exec.update(w.dead_graph), ahg.InvalidValue),
    ("ExecUpdate destroyed exec", lambda w: w.dead_exec.update(w.other), ahg.InvalidValue),
    ("ExecUpdate topology", lambda w: w.exec.update(w.other), ahg.GraphExecUpdateFailure),
    ("ExecDestroy twice", lambda w: w.dead_exec.destroy(), ahg.InvalidValue),
    # user objects
    ("UserObjectCreate refcount 0", lambda w: ahg.UserObject(print, None, 0), ahg.InvalidValue),
    (
        "UserObjectCreate refcount above INT_MAX",
        lambda w: ahg.UserObject(print, None, 2**31),
        ahg.InvalidValue,
    ),
    ("UserObjectCreate null destructor", lambda w: ahg.UserObject(None), ahg.InvalidValue),
    ("UserObjectRetain count 0", lambda w: w.user_object.retain(0), ahg.InvalidValue),
    ("UserObjectRelease count 0", lambda w: w.user_object.release(0), ahg.InvalidValue),
    ("GraphRetainUserObject null", lambda w: w.graph.retain_user_object(None), ahg.InvalidValue),
    (
        "GraphRetainUserObject count 0",
        lambda w: w.graph.retain_user_object(w.user_object, 0),
        ahg.InvalidValue,
    ),
    (
        "GraphRetainUserObject flags",
        lambda w: w.graph.retain_user_object(w.user_object, 1, 2),
        ahg.InvalidValue,
    ),
    ("GraphReleaseUserObject null", lambda w: w.graph.release_user_object(None), ahg.InvalidValue),
    (
        "GraphReleaseUserObject count above INT_MAX",
        lambda w: w.graph.release_user_object(w.user_object, 2**31),
        ahg.InvalidValue,
    ),
    # hipGraphDebugDotPrint, the graph memory pool
    ("DebugDotPrint null path", lambda w: w.graph.debug_dot_print(None), ahg.InvalidValue),
    ("DebugDotPrint unwritable path", lambda w: w.graph.debug_dot_print(""), ahg.OperatingSystem),
    (
        "DebugDotPrint destroyed graph",
        lambda w: w.dead_graph.debug_dot_print("unused.dot"),
        ahg.InvalidValue,
    ),
    (
        "DeviceGetGraphMemAttribute unknown",
        lambda w: w.device.graph_mem_attribute(9),
        ahg.InvalidValue,
    ),
    (
        "DeviceSetGraphMemAttribute current",
        lambda w: w.device.set_graph_mem_attribute(ahg.GraphMemAttribute.UsedMemCurrent, 0),
        ahg.InvalidValue,
    ),
    (
        "DeviceSetGraphMemAttribute non-zero high",
        lambda w: w.device.set_graph_mem_attribute(ahg.GraphMemAttribute.UsedMemHigh, 1),
        ahg.InvalidValue,
    ),
]


@pytest.mark.parametrize(("case", "call", "error"), CASES, ids=[case[0] for case in CASES])
def test_each_negative_case_has_hips_code_and_changes_nothing(
    world: World, case: str, call: Callable[[World], object], error: type[BaseException]
) -> None:
    before = world.stats()
    with pytest.raises(error) as raised:
        call(world)
    if issubclass(error, ahg.HipError):  # the code itself, not another code's subclass
        assert raised.value.code is error.code
    assert world.stats() == before


def test_every_error_names_its_code_once(world: World) -> None:
    """A refusal that wraps another error says its own code only (a bad device id for a
    memory-alloc node is HIP's InvalidValue, not "InvalidValue: InvalidDevice: ...")."""
    with pytest.raises(ahg.InvalidValue) as raised:
        world.graph.add_mem_alloc_node(8, device=7)
    assert str(raised.value).count("hipError") == 1
    assert "device 7 does not exist" in str(raised.value)


@pytest.mark.asyncio
async def test_launch_and_upload_check_the_executable_then_the_stream(world: World) -> None:
    stream = world.device.create_stream()
    stream.destroy()
    with pytest.raises(ahg.InvalidValue):  # hipGraphLaunch: the executable first
        await world.dead_exec.launch(stream)
    with pytest.raises(ahg.ContextIsDestroyed):
        await world.exec.launch(stream)
    nothing = ahg.Graph()
    empty = nothing.instantiate()  # an empty graph launches as a no-op, but checks its stream
    with pytest.raises(ahg.ContextIsDestroyed):
        await empty.launch(stream)
    with pytest.raises(ahg.InvalidValue):  # hipGraphUpload
        await world.dead_exec.upload(None)
    with pytest.raises(TypeError):
        await world.exec.launch(5)
    assert world.exec.statistics().launches == 0
    destroy(empty, nothing)


def test_the_api_map_names_only_calls_that_exist() -> None:
    """``docs/hip_graph_api.md`` names each call by its receiver: every one must exist."""
    import pathlib
    import re

    page = pathlib.Path(ahg.__file__).parent.parent.parent / "docs" / "hip_graph_api.md"
    if not page.exists():  # an installed package without its source tree
        pytest.skip("docs/hip_graph_api.md is not here")
    receivers = {
        "g": ahg.Graph,
        "clone": ahg.Graph,
        "n": ahg.GraphNode,
        "dst": ahg.GraphNode,
        "x": ahg.GraphExec,
        "d": ahg.Device,
        "obj": ahg.UserObject,
        "ahg": ahg,
    }
    named = re.findall(r"`(?:await )?(\w+)\.(\w+)", page.read_text())
    assert len(named) > 50
    missing = [f"{who}.{name}" for who, name in named if not hasattr(receivers[who], name)]
    assert missing == []
