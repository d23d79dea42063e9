"""The kit's blocks decorate ``async def`` functions: the block is open while the coroutine runs.

A ``contextlib.contextmanager`` block used as a decorator on a coroutine function was entered
and left while the call made the coroutine, before a line of it ran: ``@fail_kernels(1)`` on an
async test injected nothing, ``@ahg.tracing()`` recorded nothing, silently.
"""

from __future__ import annotations

from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph import testing


@ahg.kernel
def noop(t: ahg.Threads) -> None:
    pass


@pytest.mark.asyncio
async def test_a_fault_maker_decorating_a_coroutine_function_is_open_while_it_runs(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()

    @testing.fail_kernels(1)
    async def launch() -> None:
        done = await stream.launch_kernel(noop, 1, 1, ())
        with pytest.raises(ahg.LaunchFailure):
            await done

    await launch()
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    await launch()  # each call runs in a block of its own
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    stream.destroy()


@pytest.mark.asyncio
async def test_tracing_and_race_check_decorate_coroutine_functions(device: ahg.Device) -> None:
    stream = device.create_stream()
    seen: list[bool] = []

    @ahg.race_check(on_race="collect")
    @ahg.tracing()
    async def work() -> None:
        from ahipgraph.device import hooks
        from ahipgraph.tools import race

        seen.append(hooks.observers is not None and race.active())
        await (await stream.launch_kernel(noop, 1, 1, ()))

    assert work.__name__ == "work"
    await work()
    assert seen == [True]
    stream.destroy()


def test_a_plain_function_is_still_decorated_as_before() -> None:
    from ahipgraph.device import hooks

    before = hooks.observers

    @ahg.tracing()
    def inside() -> bool:
        return hooks.observers is not None and hooks.observers != before

    assert inside()
    assert hooks.observers == before


def test_one_block_object_may_be_entered_again() -> None:
    block = testing.fail_allocations(1)
    for _ in range(2):
        with block as fault, pytest.raises(ahg.OutOfMemory):
            ahg.get_device(0).malloc(8)
        assert fault.hits == 1


def test_a_block_called_wrongly_fails_at_the_call_not_at_its_with() -> None:
    """The block is made at each ``with``: without this check a wrong call was accepted and
    failed later, or (a bare ``@block`` on a function) at that function's first call."""
    with pytest.raises(TypeError, match=r"tracing\(\): .*argument"):
        ahg.tracing(3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"fail_kernels\(\): .*'nmae'"):
        testing.fail_kernels(1, nmae="k")  # type: ignore[call-arg]
    for block in (ahg.tracing, testing.fail_kernels, testing.hang_kernels):

        async def work() -> None:
            pass

        with pytest.raises(TypeError, match=r"decorates with its parentheses: @\w+\(\)"):
            block(work)  # type: ignore[arg-type]
    # Right calls still make blocks, entered at each ``with``.
    with ahg.tracing() as trace, testing.fail_kernels(None, name="k"):
        assert trace.ops == []


def test_a_fault_block_given_a_bad_value_fails_at_the_call() -> None:
    """Values were checked only as the block began: ``@testing.fail_kernels(-1)`` decorated a
    test without a word and failed each time it ran, and a block made ahead failed only at
    its ``with``."""
    with pytest.raises(ValueError, match="count must be at least 0"):
        testing.fail_kernels(-1)
    with pytest.raises(TypeError, match="count must be int or None"):
        testing.hang_kernels("2")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name must be str or None"):
        testing.fail_kernels(name=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="nbytes must be at least 0"):
        testing.fail_allocations(nbytes=-8)
    with pytest.raises(TypeError, match="expected a GraphExec"):
        testing.exhaust_signal_sets(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="count must be at least 0"):

        @testing.fail_kernels(-1)
        async def decorated() -> None:
            pass


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"count": 0}, ValueError, "at least one device"),
        ({"count": True}, TypeError, "count"),
        ({"count": 2, "properties": [ahg.DeviceProperties()]}, ValueError, "2 devices but 1"),
        ({"properties": "x"}, TypeError, "DeviceProperties"),
        ({"check": "no"}, TypeError, "check must be a bool"),
    ],
)
def test_fresh_devices_given_a_bad_value_fails_at_the_call(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    """Checked when called, as the fault blocks are: a block made ahead or a decorator fails
    there, and the devices are untouched."""
    device = ahg.get_device(0)
    with pytest.raises(error, match=match):
        testing.fresh_devices(**kwargs)
    with pytest.raises(error, match=match):

        @testing.fresh_devices(**kwargs)
        def decorated() -> None:
            pass

    assert ahg.get_device(0) is device
