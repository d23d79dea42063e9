"""Kernel declarations and arguments under hostile input: each test pins a case that was
accepted silently or escaped with an error that did not name the kernel."""

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def takes_floats(t: ahg.Threads, a: ahg.float32, b: ahg.float64) -> None:
    pass


@pytest.mark.parametrize("slot", range(2))
@pytest.mark.parametrize("value", [np.timedelta64(5), np.timedelta64(5, "s")])
def test_a_duration_is_not_a_float_argument(slot: int, value: Any) -> None:
    """``np.timedelta64`` subclasses ``np.integer``, so a duration was packed as its count
    (5 seconds as 5.0), while integer parameters already refuse it as not a number."""
    args: list[Any] = [1.0, 1.0]
    args[slot] = value
    with pytest.raises(TypeError, match="needs a number"):
        takes_floats.pack(args)


def test_a_graph_refuses_a_duration_for_a_float_and_adds_no_node() -> None:
    graph = ahg.Graph()
    with pytest.raises(TypeError, match="needs a number"):
        graph.add_kernel_node(takes_floats, 1, 1, (np.timedelta64(1), 1.0))
    assert graph.nodes() == []
    graph.destroy()


def index_error(t: ahg.Threads, n: "[][1]") -> None:  # type: ignore[valid-type]
    pass


def key_error(t: ahg.Threads, n: "{}[0]") -> None:  # type: ignore[valid-type]
    pass


def value_error(t: ahg.Threads, n: "int('x')") -> None:  # type: ignore[valid-type]
    pass


@pytest.mark.parametrize(
    ("body", "cause"),
    [(index_error, IndexError), (key_error, KeyError), (value_error, ValueError)],
)
def test_any_annotation_that_fails_to_evaluate_is_a_type_error(body: Any, cause: type) -> None:
    """Only name, attribute, syntax and arithmetic errors were turned into the kernel's
    TypeError; an annotation failing any other way escaped as that error, naming nothing."""
    with pytest.raises(TypeError, match=f"kernel '{body.__name__}'.*cannot be evaluated") as info:
        ahg.kernel(body)
    assert isinstance(info.value.__cause__, cause)


@pytest.mark.parametrize("body", [int, dict])
def test_a_callable_without_a_signature_is_a_type_error(body: Any) -> None:
    """``inspect`` cannot read some builtins' signatures, and its ValueError escaped."""
    with pytest.raises(TypeError, match=f"kernel '{body.__name__}'.*no signature"):
        ahg.kernel(body)


@ahg.kernel
def unlocks_its_const(t: ahg.Threads, x: ahg.ConstPtr[ahg.float32]) -> None:
    x.flags.writeable = True  # numpy allows it on a view of writeable memory
    x[0] = 42.0


@ahg.kernel(extents={"x": 2})
def unlocks_its_counted_const(t: ahg.Threads, x: ahg.ConstPtr[ahg.float32]) -> None:
    x.flags.writeable = True
    x[0] = 43.0


@pytest.mark.asyncio
@pytest.mark.parametrize("body", [unlocks_its_const, unlocks_its_counted_const])
async def test_a_const_pointer_cannot_be_made_writeable_by_its_body(
    device: ahg.Device, body: ahg.Kernel
) -> None:
    """A ConstPtr view had only its writeable flag cleared, so a body could set it back and
    write through a read-only parameter, unseen by the race checker that trusts it."""
    x = device.malloc(16)
    device.view(x, np.float32)[:] = 1.0
    stream = device.create_stream()
    with pytest.raises(ahg.LaunchFailure, match="WRITEABLE"):
        await (await stream.launch_kernel(body, 1, 1, (x,)))
    graph = ahg.Graph()
    graph.add_kernel_node(body, 1, 1, (x,))
    exec_ = graph.instantiate()
    for _ in range(2):  # the first replay decodes, the second reuses what it decoded
        with pytest.raises(ahg.LaunchFailure, match="WRITEABLE"):
            await (await exec_.launch(stream))
    assert (device.view(x, np.float32) == 1.0).all()
    destroy(exec_, graph, stream, x)


@ahg.kernel
def reads_const(t: ahg.Threads, x: ahg.ConstPtr[ahg.float32], y: ahg.Ptr[ahg.float32]) -> None:
    y[: len(x)] = x * 2


@pytest.mark.asyncio
async def test_a_const_pointer_still_sees_the_memory_as_it_is_at_each_replay(
    device: ahg.Device,
) -> None:
    x, y = device.malloc(16), device.malloc(16)
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(reads_const, 1, 1, (x + 4, y))
    exec_ = graph.instantiate()
    for value in (1.0, 5.0):
        device.view(x, np.float32)[:] = value
        await (await exec_.launch(stream))
        assert device.view(y, np.float32).tolist() == [value * 2] * 3 + [0.0]
    destroy(exec_, graph, stream, x, y)


@ahg.kernel
def stores(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] = n


@pytest.mark.asyncio
async def test_a_mutable_scalar_argument_changed_after_the_add_changes_nothing(
    device: ahg.Device,
) -> None:
    """A 0-d array is an integer by ``__index__``: it was packed, but the node kept the array
    itself, so after the caller changed it the node's parameters showed a value the node did
    not run with, and setting those parameters back changed what it ran."""
    x = device.malloc(4)
    stream = device.create_stream()
    count = np.array(5)
    graph = ahg.Graph()
    node = graph.add_kernel_node(stores, 1, 1, (count, x))
    count[...] = 7
    assert node.params.args == (5, x)
    assert type(node.params.args[0]) is int
    node.params = node.params
    exec_ = graph.instantiate()
    await (await exec_.launch(stream))
    assert device.view(x, np.int32).tolist() == [5]
    destroy(exec_, graph, stream, x)


def test_plain_and_numpy_arguments_are_kept_as_the_values_packed(device: ahg.Device) -> None:
    x = device.malloc(4)
    graph = ahg.Graph()
    plain = graph.add_kernel_node(stores, 1, 1, (7, x))
    numpy = graph.add_kernel_node(stores, (1,), 1, [np.int16(-3), x])
    assert plain.params.args == (7, x)
    assert numpy.params.args == (-3, x)
    assert type(numpy.params.args[0]) is int
    destroy(graph, x)
