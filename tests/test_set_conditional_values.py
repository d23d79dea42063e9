"""What ``ahg.set_conditional`` takes: HIP's unsigned 32-bit value, or a bool.

It assigned the value into the handle's cell as numpy does, so a float was truncated, a string
parsed and a negative numpy integer wrapped to 2**32 - 1 (taking an IF that should not run);
called with the handle itself (outside a kernel) it failed with numpy's item-assignment error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg

K = ahg.ConditionalKind
_GIVEN: list[Any] = []


@ahg.kernel
def decide(t: ahg.Threads, h: ahg.CondHandle) -> None:
    ahg.set_conditional(h, _GIVEN[-1])


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


async def run_if(device: ahg.Device, value: Any) -> tuple[int, str]:
    """Launch ``decide(value) -> IF(bump)`` once: the count of bumps (0 or 1) and the
    launch's error ("" if none)."""
    x = device.malloc(4)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=0)
    first = graph.add_kernel_node(decide, 1, 1, (handle,))
    _, (body,) = graph.add_conditional_node(handle, K.If, deps=[first])
    body.add_kernel_node(bump, 1, 1, (x,))
    graph_exec = graph.instantiate()
    _GIVEN.append(value)
    error = ""
    try:
        await (await graph_exec.launch())
    except ahg.LaunchFailure as failure:
        error = str(failure)
    try:
        return int(device.view(x, np.int32, 1)[0]), error
    finally:
        _GIVEN.clear()
        graph_exec.destroy()
        graph.destroy()
        device.free(x)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("value", "taken"),
    [(1, 1), (0, 0), (2**32 - 1, 1), (np.uint32(7), 1), (True, 1), (np.bool_(False), 0)],
)
async def test_ints_in_range_and_bools_are_taken(
    device: ahg.Device, value: Any, taken: int
) -> None:
    assert await run_if(device, value) == (taken, "")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("value", "error"),
    [
        (-1, "unsigned 32-bit int, got -1"),
        (np.int64(-1), "unsigned 32-bit int, got -1"),
        (2**32, "unsigned 32-bit int, got 4294967296"),
        (1.5, "int or a bool, got 1.5"),
        ("1", "int or a bool, got '1'"),
        (None, "int or a bool, got None"),
    ],
)
async def test_other_values_fail_the_kernel_and_the_body_does_not_run(
    device: ahg.Device, value: Any, error: str
) -> None:
    taken, failure = await run_if(device, value)
    assert error in failure
    assert taken == 0


@pytest.mark.parametrize("handle", [None, 5])
def test_outside_a_kernel_it_names_what_it_takes(handle: Any) -> None:
    with pytest.raises(TypeError, match="kernel's CondHandle parameter"):
        ahg.set_conditional(handle, 1)


def test_the_handle_object_itself_is_not_a_kernel_parameter() -> None:
    graph = ahg.Graph()
    with pytest.raises(TypeError, match="kernel's CondHandle parameter"):
        ahg.set_conditional(graph.conditional_handle(), 1)  # type: ignore[arg-type]
    graph.destroy()
