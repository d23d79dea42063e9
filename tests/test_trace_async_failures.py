"""A traced op whose async body fails carries its error, as a failed synchronous body's does.

An async kernel or host function is recorded when its body starts (the queue then waits for
it); the failure came later and never reached the trace, so the slice said nothing of it.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from ahipgraph import testing


@pytest.mark.asyncio
async def test_an_async_kernel_and_host_function_that_fail_carry_their_errors(
    device: ahg.Device,
) -> None:
    async def body(t: ahg.Threads) -> None:
        raise RuntimeError("kernel failed")

    async def host() -> None:
        raise RuntimeError("host failed")

    stream = device.create_stream()
    with ahg.tracing() as trace:
        await stream.launch_kernel(ahg.Kernel(body, name="failing"), 1, 1, ())
        await stream.launch_host_func(host)
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()
    errors = {op.kind: op.error for op in trace.ops}
    assert errors == {
        "kernel": "RuntimeError('kernel failed')",
        "host": "RuntimeError('host failed')",
    }
    stream.destroy()


@pytest.mark.asyncio
async def test_a_hung_kernel_cancelled_is_traced_as_failed(device: ahg.Device) -> None:
    @ahg.kernel
    def held(t: ahg.Threads) -> None:
        pass

    stream = device.create_stream()
    with ahg.tracing() as trace, testing.hang_kernels(1) as hang:
        done = await stream.launch_kernel(held, 1, 1, ())
        await hang.started.wait()
        hang.cancel()
        with pytest.raises(ahg.LaunchFailure):
            await done
    (op,) = trace.ops
    assert op.error is not None
    assert "hung kernel cancelled" in op.error
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    stream.destroy()


@pytest.mark.asyncio
async def test_an_async_body_that_succeeds_has_no_error(device: ahg.Device) -> None:
    async def host() -> None:
        pass

    stream = device.create_stream()
    with ahg.tracing() as trace:
        await stream.launch_host_func(host)
        await stream.synchronize()
    (op,) = trace.ops
    assert op.error is None
    stream.destroy()
