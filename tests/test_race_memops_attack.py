"""The race checker's account of stream memory operations under a user's attacks: races held
behind a wait still pending as the last check ends."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy

# Under ``make race`` a check spans the whole run, so a test's own check is never the last to
# end: what these tests pin happens only as the last check ends.
RACE_CHECK = bool(os.environ.get("AHIPGRAPH_RACE_CHECK"))

F = ahg.StreamWaitFlag


@ahg.kernel
def produce(t: ahg.Threads, x: ahg.Ptr[ahg.uint32]) -> None:
    x[0] = 7


@ahg.kernel
def consume(t: ahg.Threads, x: ahg.ConstPtr[ahg.uint32], out: ahg.Ptr[ahg.uint32]) -> None:
    out[0] = x[0]


def _streams(device: ahg.Device) -> tuple[ahg.Stream, ahg.Stream]:
    return device.create_stream(non_blocking=True), device.create_stream(non_blocking=True)


@pytest.mark.skipif(RACE_CHECK, reason="pins what the last check to end does")
@pytest.mark.asyncio
async def test_a_race_held_by_a_wait_still_pending_as_the_check_ends_is_reported_once(
    device: ahg.Device,
) -> None:
    """Nothing decides a held race once the last check is off: it was lost, however the
    wait was released afterwards. It is reported to the check as it ends, once."""
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    with ahg.race_check(on_race="collect") as rc:
        await b.wait_value_32(flag, 1, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))
        await a.launch_kernel(produce, 1, 1, (x,))  # nothing orders it with the consumer
    assert [r.kind for r in rc.reports] == ["write-after-read"]
    device.view(flag, np.uint32, 1)[0] = 1  # released after the check: nothing more
    await b.synchronize()
    await a.synchronize()
    assert len(rc.reports) == 1
    destroy(x, flag, out, a, b)


@pytest.mark.skipif(RACE_CHECK, reason="pins what the last check to end does")
@pytest.mark.asyncio
async def test_a_handshake_whose_write_is_enqueued_as_the_check_ends_is_not_reported(
    device: ahg.Device,
) -> None:
    """The write that will release the wait is enqueued, after the producer, before the
    check ends: the held pair is ordered by it, not reported."""
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ahg.race_check(on_race="raise") as rc:
            await b.wait_value_32(flag, 1, F.EQ)
            await b.launch_kernel(consume, 1, 1, (x, out))
            await a.launch_kernel(produce, 1, 1, (x,))
            await a.write_value_32(flag, 2)  # does not meet the wait
            await a.write_value_32(flag, 1)
    await b.synchronize()
    await a.synchronize()
    assert rc.reports == []
    destroy(x, flag, out, a, b)
