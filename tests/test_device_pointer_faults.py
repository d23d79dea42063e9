"""A kernel given a pointer its device cannot reach fails with an InvalidDevicePointer that
names the device owning the address, not the device the kernel ran on."""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def touch(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


async def _cause(stream: ahg.Stream, ptr: ahg.DevicePtr) -> str:
    failed = await stream.launch_kernel(touch, 1, 1, (ptr,))
    with pytest.raises(ahg.LaunchFailure) as caught:
        await failed
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()  # the stream reports it once
    cause = caught.value.__cause__
    assert isinstance(cause, ahg.InvalidDevicePointer)
    return str(cause)


@pytest.mark.asyncio
async def test_a_peer_pointer_without_access_names_its_owner() -> None:
    ahg.configure_devices(3)
    d0, d2 = ahg.get_device(0), ahg.get_device(2)
    remote = d2.malloc(64)
    stream = d0.create_stream()
    message = await _cause(stream, remote)
    assert "device 2's address range" in message
    assert "device 0 has no peer access" in message
    assert "device=0" not in message  # it was shown as a pointer of device 0
    # With access the same launch works, and after disabling it fails the same way again.
    d0.enable_peer_access(d2)
    await stream.launch_kernel(touch, 1, 1, (remote,))
    await stream.synchronize()
    d0.disable_peer_access(2)
    assert "device 2's address range" in await _cause(stream, remote)
    assert d2.view(remote, "int32", 1)[0] == 1
    d2.free(remote)
    destroy(stream)


@pytest.mark.asyncio
async def test_an_address_below_every_device_range_is_not_a_device_address(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    message = await _cause(stream, ahg.DevicePtr(0, 4096))
    assert "0x1000 is not a device address" in message
    destroy(stream)
