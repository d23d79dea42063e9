"""Misuse of the latest changes that used to get through: each test names what it did before."""

from __future__ import annotations

import pytest

import ahipgraph as ahg


def _declare() -> ahg.Kernel:
    @ahg.kernel(duration_ns=100)
    def store(t: ahg.Threads, x: ahg.Ptr[ahg.int32], n: ahg.int32) -> None:
        x[0] = n

    return store


@pytest.mark.parametrize("field", ["body", "name", "layout", "duration_ns", "is_async"])
@pytest.mark.asyncio
async def test_a_kernel_field_cannot_be_deleted(device: ahg.Device, field: str) -> None:
    """Assigning a kernel's field is checked, so deleting it must not bypass the check: a
    deleted body left the kernel with no body and the removed body's ``is_async``, and every
    later launch or node failed with a bare AttributeError from inside the runtime."""
    store = _declare()
    before = getattr(store, field)
    with pytest.raises(AttributeError, match="cannot be deleted"):
        delattr(store, field)
    assert getattr(store, field) is before
    ptr = device.malloc(4)
    stream = device.create_stream()
    await (await stream.launch_kernel(store, (1,), (1,), [ptr, 7]))
    assert device.view(ptr, "int32", 1, readonly=True).tolist() == [7]
    stream.destroy()
    device.free(ptr)
