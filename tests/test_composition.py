"""The shape of ``Graph`` and ``GraphExec``: composed from parts, not from stub mixins.

``Graph`` keeps thin public methods over module functions; ``GraphExec`` is made from the record
``instantiate()`` returns and delegates to a launcher and an updater. Every device op is defined
once, in the documented places. A half-made executable gives back everything it took.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.core.lifecycle import DestroyOnExit
from ahipgraph.device.ops import Op
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.runtime.stream import STREAMS
from fakes import HeldKernel, loop_turns


@ahg.kernel
def touch(t: ahg.Threads, x: ahg.int32) -> None:
    return None


# Where ops may be defined: the device layer's catalogue, and the few that still need a higher
# layer's types (a kernel's arena check, a conditional's kind, a pitched copy's geometry) or
# live with the compile step of the executable.
OP_HOMES = {
    "ahipgraph.device.ops",
    "ahipgraph.exec.compile",
    "ahipgraph.exec.conditional",
    "ahipgraph.runtime.pitched",
    "ahipgraph.tools.race",  # the race checker's watched host-source copy
}


def _all_op_classes() -> list[type[Op]]:
    for info in pkgutil.walk_packages(ahg.__path__, "ahipgraph."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
    found: list[type[Op]] = []
    pending: list[type[Op]] = [Op]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def test_every_op_kind_is_defined_once_in_a_documented_home() -> None:
    ops = _all_op_classes()
    names = [cls.__name__ for cls in ops]
    assert len(names) == len(set(names)), sorted(names)
    assert {cls.__module__ for cls in ops} <= OP_HOMES
    assert len(ops) >= 15  # the walk really found them
    for name in ("FreeOp", "StreamMemOpOp", "DefaultsOp", "WaitSignalIndicesOp", "SignalIndexOp"):
        assert getattr(importlib.import_module("ahipgraph.device.ops"), name).__name__ == name


@pytest.mark.parametrize("cls", [ahg.Graph, ahg.GraphExec])
def test_graph_and_executable_are_composed_not_mixed(cls: type) -> None:
    assert cls.__mro__ == (cls, DestroyOnExit, object)
    for name, member in vars(cls).items():
        if inspect.isfunction(member):
            assert "NotImplementedError" not in inspect.getsource(member), name


def test_a_wrong_setter_call_names_graph_exec(device: ahg.Device) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate()
    bad: Any = graph_exec.set_kernel_node_params
    with pytest.raises(TypeError, match=r"^GraphExec\.set_kernel_node_params\(\) missing"):
        bad()
    wrong: Any = graph.add_memcpy_3d_node
    with pytest.raises(TypeError, match=r"^Graph\.add_memcpy_3d_node\(\) missing"):
        wrong()
    graph_exec.destroy()
    graph.destroy()


def _fork(width: int) -> ahg.Graph:
    graph = ahg.Graph()
    root = graph.add_empty_node()
    for i in range(width):
        graph.add_kernel_node(touch, 1, 1, (i,), deps=[root])
    return graph


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_an_instantiate_that_fails_making_its_streams_gives_back_every_one(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    probe_graph = _fork(8)
    probe = probe_graph.instantiate()
    strands = probe.statistics().strands
    probe.destroy()
    probe_graph.destroy()
    graph = _fork(8)
    assert strands == 4  # three internal streams to make
    streams, in_use = STREAMS.statistics().live, device.memory.bytes_in_use
    made = 0
    original = ahg.Stream._create  # the one way the runtime makes its own streams

    def flaky(*args: Any, **kwargs: Any) -> ahg.Stream:
        nonlocal made
        made += 1
        if made == fail_at:
            raise ahg.OutOfMemory("no room for another stream")
        return original(*args, **kwargs)

    monkeypatch.setattr(ahg.Stream, "_create", staticmethod(flaky))
    with pytest.raises(ahg.OutOfMemory):
        graph.instantiate()
    monkeypatch.undo()
    assert STREAMS.statistics().live == streams
    assert device.memory.bytes_in_use == in_use  # the arena's chunk was given back
    assert graph.statistics().instantiated is False
    graph_exec = graph.instantiate()  # the graph is as it was: it instantiates again
    assert graph_exec.statistics().strands == strands
    graph_exec.destroy()
    live_graphs = GRAPHS.statistics().live
    graph.destroy()
    assert GRAPHS.statistics().live == live_graphs - 1


@pytest.mark.asyncio
async def test_launcher_completion_frees_argument_slots_the_updater_retired(
    device: ahg.Device,
) -> None:
    graph = ahg.Graph()
    node = graph.add_kernel_node(touch, 1, 1, (1,))
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    first = await graph_exec.launch(stream)
    graph_exec.set_kernel_node_params(node, touch, 1, 1, (2,))  # in flight: a new slot
    during = graph_exec.statistics()
    assert (during.versions, during.arena.live_slots) == (2, 2)
    await first
    after = graph_exec.statistics()
    assert (after.in_flight, after.completed, after.arena.live_slots) == (0, 1, 1)
    assert after.arena.free_slots == 1  # the superseded slot came back
    graph_exec.destroy()
    stream.destroy()
    graph.destroy()


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = value


@pytest.mark.asyncio
async def test_a_launch_parked_for_a_signal_set_runs_the_version_current_when_it_is_enqueued(
    device: ahg.Device,
) -> None:
    held = HeldKernel()
    out = device.malloc(16)
    device.view(out, np.int64, 2)[:] = 0
    graph = ahg.Graph()
    hold = graph.add_kernel_node(held.kernel, 1, 1)
    write = graph.add_kernel_node(put, 1, 1, (1, 0, out), deps=[hold])
    graph_exec = graph.instantiate(signal_sets=1)
    stream = device.create_stream()
    first = await graph_exec.launch(stream)  # takes the only set, held in its first node
    await held.started.wait()
    parked = asyncio.ensure_future(graph_exec.launch(stream))
    await loop_turns()
    assert graph_exec.statistics().signal_pool.waiters == 1
    # An update while the first launch is in flight and the second is parked: the first keeps
    # its arguments, the second (enqueued after the update) takes the new ones.
    graph_exec.set_kernel_node_params(write, put, 1, 1, (7, 1, out))
    assert graph_exec.statistics().versions == 2
    held.release()
    second = await parked
    await first
    await second
    assert list(device.view(out, np.int64, 2)) == [1, 7]
    stats = graph_exec.statistics()
    assert (stats.launches, stats.completed, stats.in_flight) == (2, 2, 0)
    assert (stats.arena.live_slots, stats.arena.free_slots) == (2, 1)  # the old slot retired
    assert stats.signal_pool.sets == 1  # the wait policy never grew the pool
    graph_exec.destroy()
    stream.destroy()
    graph.destroy()
    device.free(out)


# -- four kinds of slot, four names (docs/design.md) ----------------------------------------------

# The argument-slot and handle-slot spellings, and Python's own; strands and signal indices have
# their own names (strand, strand_ops, WaitSignalIndicesOp.indices, SignalIndexOp.index...).
SLOT_SPELLINGS = {
    "ArgSlot",
    "arg_slot",
    "arg_slots",
    "arg_slot_of",
    "move_arg_slot",
    "live_slots",
    "free_slots",
    "__slots__",
}
ARENA_MODULE = "arena.py"  # every slot in the arena module is an argument slot


def _slot_spellings(source: str, module: str) -> list[str]:
    """Identifiers (and ``__slots__`` entries) of ``source`` that call something else "slot"."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.keyword) and node.arg != "slots":  # @dataclass(slots=True)
            names = [node.arg or ""]
        elif isinstance(node, ast.Attribute):
            if node.attr == "slot" and ast.unparse(node.value).endswith("hid"):
                continue  # the registry row of a handle id
            names = [node.attr]
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names = [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)]
        for name in names:
            if "slot" not in name.lower() or name in SLOT_SPELLINGS:
                continue
            if module == ARENA_MODULE and name in ("slot", "slots"):
                continue
            found.append(f"{module}:{getattr(node, 'lineno', '?')}: {name}")
    return found


def test_the_slot_finder_flags_a_strand_or_signal_index_spelled_slot() -> None:
    plan_code = "for slot, ids in enumerate(layout.slots):\n    ops.append(WaitSlotOp(ids))\n"
    assert sorted(_slot_spellings(plan_code, "compile.py")) == [
        "compile.py:1: slot",
        "compile.py:1: slots",
        "compile.py:2: WaitSlotOp",
    ]
    op_code = (
        "class SignalOp:\n    __slots__ = ('slot',)\n    def run(self, p):\n        p[self.slot]\n"
    )
    assert len(_slot_spellings(op_code, "ops.py")) == 2  # the __slots__ entry and the attribute
    allowed = (
        "@dataclass(slots=True)\nclass S:\n    __slots__ = ()\n"
        "def f(arg_slot: ArgSlot, h: Any) -> None:\n"
        "    print(h.hid.slot, arg_slot, stats.live_slots)\n"
    )
    assert _slot_spellings(allowed, "compile.py") == []
    assert _slot_spellings("slot = arena.allocate(8)\n", ARENA_MODULE) == []
    assert _slot_spellings("slot = arena.allocate(8)\n", "compile.py") == ["compile.py:1: slot"]


def test_the_exec_layer_and_the_ops_give_each_kind_of_slot_its_own_name() -> None:
    package = Path(ahg.__file__).parent
    files = [*sorted((package / "exec").glob("*.py")), package / "device" / "ops.py"]
    assert len(files) > 10  # the walk really found the modules
    found: list[str] = []
    for path in files:
        found += _slot_spellings(path.read_text(encoding="utf-8"), path.name)
    assert found == []


@pytest.mark.asyncio
async def test_statistics_and_the_plan_dot_speak_of_strands(device: ahg.Device) -> None:
    graph = ahg.Graph()
    root = graph.add_empty_node()
    left = graph.add_kernel_node(touch, 1, 1, (1,), deps=[root])
    right = graph.add_kernel_node(touch, 1, 1, (2,), deps=[root])
    graph.add_empty_node(deps=[left, right])
    with graph.instantiate() as graph_exec:
        assert graph_exec.statistics().strands == 2
        assert "slots" not in {f.name for f in dataclasses.fields(graph_exec.statistics())}
        dot = graph_exec.plan_dot()
        assert "strand 0 (launch stream)" in dot
        assert "subgraph cluster_strand_1" in dot
        assert "slot" not in dot
        assert "strands=2" in repr(graph_exec)
        await (await graph_exec.launch(device.null_stream))
        assert graph_exec.statistics().completed == 1
    graph.destroy()
