"""A kernel is a definition its user may change, but only to values it could be declared with.

A later node or launch reads a kernel afresh (tests/test_add_kernel_fast_path.py), so its fields
stay assignable; each assignment is checked as the declaration is. A negative or float duration
used to be taken as it was: the device's clock then stood still behind a kernel of negative
length, or became a float.
"""

from __future__ import annotations

import asyncio
import copy

import pytest

import ahipgraph as ahg


def _declare() -> ahg.Kernel:
    @ahg.kernel
    def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int32], n: ahg.int32) -> None:
        x[0] += n

    return bump


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (-1, ValueError),
        (-(10**12), ValueError),
        (1.5, TypeError),
        (True, TypeError),
        ("5", TypeError),
    ],
)
def test_a_duration_assigned_is_checked_as_a_declared_one(value: object, error: type) -> None:
    bump = _declare()
    bump.duration_ns = 500
    with pytest.raises(error, match="duration_ns"):
        bump.duration_ns = value  # type: ignore[assignment]
    assert bump.duration_ns == 500  # unchanged
    with pytest.raises(error, match="duration_ns"):
        ahg.kernel(duration_ns=value)(bump.body)  # type: ignore[arg-type]


def test_a_kernel_of_a_duration_assigned_later_keeps_the_clock_an_increasing_int() -> None:
    async def main() -> None:
        device = ahg.get_device(0)
        bump = _declare()
        x = device.malloc(4)
        stream = device.create_stream()
        try:
            with pytest.raises(ValueError):
                bump.duration_ns = -(10**9)
            with pytest.raises(TypeError):
                bump.duration_ns = 2.5  # type: ignore[assignment]
            before = device.clock.now
            await stream.launch_kernel(bump, 1, 1, (x, 1))
            await stream.synchronize()
            after = device.clock.now
            assert type(after) is int
            assert after > before
            bump.duration_ns = 1_000_000
            await stream.launch_kernel(bump, 1, 1, (x, 1))
            await stream.synchronize()
            assert device.clock.now - after >= 1_000_000
        finally:
            stream.destroy()
            device.free(x)

    asyncio.run(main())


def test_a_kernel_s_name_layout_and_body_are_checked_when_assigned() -> None:
    bump = _declare()
    for name in (None, 3, ""):
        with pytest.raises(TypeError, match="name"):
            bump.name = name  # type: ignore[assignment]
    with pytest.raises(TypeError, match="layout"):
        bump.layout = None  # type: ignore[assignment]
    with pytest.raises(TypeError, match="body"):
        bump.body = 42  # type: ignore[assignment]

    def generator(t: ahg.Threads, x: ahg.Ptr[ahg.int32], n: ahg.int32):  # type: ignore[no-untyped-def]
        yield

    with pytest.raises(TypeError, match="body"):
        bump.body = generator
    assert bump.name == "bump"
    assert not bump.is_async


def test_is_async_follows_the_body() -> None:
    bump = _declare()

    async def later(t: ahg.Threads, x: ahg.Ptr[ahg.int32], n: ahg.int32) -> None:
        x[0] += n

    bump.body = later
    assert bump.is_async
    with pytest.raises(AttributeError, match="body"):
        bump.is_async = False
    assert bump.is_async


def test_a_copied_kernel_is_the_same_definition() -> None:
    bump = _declare()
    bump.duration_ns = 7
    twin = copy.copy(bump)
    assert (twin.body, twin.name, twin.layout, twin.duration_ns, twin.is_async) == (
        bump.body,
        bump.name,
        bump.layout,
        7,
        False,
    )
