"""Classes whose instances only a factory makes refuse every direct call with one hint.

``ahg.Stream()`` used to give Python's "missing 1 required positional argument" while
``ahg.Stream(device)`` named ``device.create_stream()``; now the hint is the same whatever the
call (no arguments, positional, keyword), and the factories build their instances without
calling the refusing constructor.
"""

from __future__ import annotations

from typing import Any

import pytest

import ahipgraph as ahg

# (class, a word of the hint naming its factory)
FACTORY_ONLY: list[tuple[type[Any], str]] = [
    (ahg.Stream, "create_stream"),
    (ahg.Event, "create_event"),
    (ahg.GraphExec, "instantiate"),
    (ahg.Device, "get_device"),
    (ahg.GraphNode, "add_"),
    (ahg.Completion, "enqueue or a launch"),
    (ahg.ConditionalHandle, "conditional_handle"),
    (ahg.DeviceSymbol, "device_symbol"),
    (ahg.HostFunction, "host_function"),
]

CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((), {}),
    ((0,), {}),
    ((None, None, None, None, None, None), {}),
    ((), {"device": None}),
    ((), {"_key": None}),
    ((), {"anything": 1}),
    ((0,), {"priority": 0, "flags": 0}),
]


@pytest.mark.parametrize(("cls", "hint"), FACTORY_ONLY, ids=lambda v: getattr(v, "__name__", ""))
@pytest.mark.parametrize(
    ("args", "kwargs"), CALLS, ids=["none", "one", "many", "kw", "key", "unknown_kw", "mixed"]
)
def test_a_factory_only_class_called_directly_names_its_factory(
    cls: type[Any], hint: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(TypeError, match=hint):
        cls(*args, **kwargs)


def test_the_factories_still_make_every_such_instance() -> None:
    device = ahg.get_device(0)
    assert type(device) is ahg.Device
    with ahg.Graph() as graph:
        handle = graph.conditional_handle(default=3, assign_default=False)
        assert type(handle) is ahg.ConditionalHandle
        assert (handle.graph_id, handle.default, handle.assign_default) == (graph.id, 3, False)
        node = graph.add_empty_node()
        assert type(node) is ahg.GraphNode
        with device.create_stream() as stream, device.create_event() as event:
            assert type(stream) is ahg.Stream
            assert type(event) is ahg.Event
            with graph.instantiate() as graph_exec:
                assert type(graph_exec) is ahg.GraphExec


@pytest.mark.asyncio
async def test_enqueues_and_launches_still_return_completions(device: ahg.Device) -> None:
    out = device.malloc(8)
    with device.create_stream() as stream, ahg.Graph() as graph:
        graph.add_empty_node()
        with graph.instantiate() as graph_exec:
            done = await stream.memset(out, 1, 8)
            launched = await graph_exec.launch(stream)
            assert type(done) is ahg.Completion
            assert type(launched) is ahg.Completion
            await launched
            assert done.done()
    device.free(out)


def test_a_device_symbol_made_by_hand_cannot_stand_beside_the_declared_one() -> None:
    """A hand-made symbol skipped ``device_symbol``'s checks and its one-symbol-per-name
    table: a negative extent was accepted, and a second ``DeviceSymbol`` of a declared name
    had storage, and an address, of its own."""
    import numpy as np

    declared = ahg.device_symbol("factory_only_symbol", dtype=np.int32, shape=(4,))
    with pytest.raises(TypeError, match="device_symbol"):
        ahg.DeviceSymbol("factory_only_symbol", np.dtype(np.int32), (4,))
    with pytest.raises(TypeError, match="device_symbol"):
        ahg.DeviceSymbol("negative", np.dtype(np.int32), (-1, -2))
    assert ahg.device_symbol("factory_only_symbol", dtype=np.int32, shape=(4,)) is declared
    assert declared.nbytes == 16


def test_host_functions_still_come_from_their_declaration() -> None:
    def fn() -> None:
        """A host function with no regions."""

    declared = ahg.host_function(fn)
    assert type(declared) is ahg.HostFunction
    assert declared.fn is fn
    assert declared.__name__ == "fn"
    with pytest.raises(TypeError, match="host_function"):
        ahg.HostFunction(fn, (), ())


def test_a_conditional_handle_cannot_be_made_by_hand_with_a_default_out_of_range() -> None:
    """A hand-made handle skipped ``conditional_handle``'s checks: one with a negative default
    was taken by a conditional node, and every instantiate of the graph then failed with
    numpy's ``OverflowError`` instead of a HipError."""
    with ahg.Graph() as graph:
        with pytest.raises(TypeError, match="conditional_handle"):
            ahg.ConditionalHandle(graph.id, -5, False)
        with pytest.raises(ahg.InvalidValue, match="unsigned 32-bit"):
            graph.conditional_handle(default=-5)
        assert graph.statistics().nodes == 0
