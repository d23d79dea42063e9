"""The reshaped core attacked as a hostile user would: each test is an attack that once broke it.

Cancellation at awaits, calls from other loops and threads, user code that raises anything,
bad arguments and handles destroyed or forgotten while work is in flight. Each test proves with
``statistics()`` that everything is back at its baseline and that the device keeps working.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


def raising(error: BaseException) -> Any:
    def body(*args: Any) -> None:
        raise error

    return body


# -- user code that raises a BaseException which is not an interrupt ----------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["host", "kernel", "graph"])
async def test_generator_exit_from_user_code_fails_that_op_and_does_not_escape(
    device: ahg.Device, where: str
) -> None:
    """GeneratorExit is not an interrupt (asyncio lets only KeyboardInterrupt and SystemExit
    escape): it is the op's LaunchFailure, and nothing reaches the loop's exception handler."""
    reported: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: reported.append(ctx))

    @ahg.kernel
    def exits(t: ahg.Threads) -> None:
        raise GeneratorExit

    out = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    graph_exec = None
    if where == "host":
        failed = await stream.launch_host_func(raising(GeneratorExit()))
    elif where == "kernel":
        failed = await stream.launch_kernel(exits, 1, 1, ())
    else:
        graph.add_host_node(raising(GeneratorExit()))
        graph_exec = graph.instantiate()
        failed = await graph_exec.launch(stream)
    behind = await stream.launch_kernel(add_one, 1, 1, (out,))
    with pytest.raises(ahg.LaunchFailure) as caught:
        await failed
    assert isinstance(caught.value.__cause__, GeneratorExit)
    await behind
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    assert reported == []
    assert device.view(out, "int64", 1)[0] == 1
    destroy(*([graph_exec] if graph_exec else []), graph, out, stream)
