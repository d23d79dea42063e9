"""A Device kept after ``configure_devices`` replaced it: every call that would make something
on it, or answer for it as if it were configured, is ``InvalidDevice`` and changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg


def test_a_replaced_device_makes_no_null_stream() -> None:
    """The null stream is made on first use; one made on a replaced device stayed registered
    (its implicit streams are retired only once, when it is replaced)."""
    old = ahg.get_device(0)
    ahg.configure_devices(1)
    with pytest.raises(ahg.InvalidDevice, match="no longer"):
        old.null_stream  # noqa: B018 - the property makes the stream
    assert old.statistics().implicit_streams == 0
    assert old.streams == ()
    assert ahg.get_device(0).null_stream.alive  # its successor still has one


def test_a_null_stream_made_before_the_replacement_is_retired_with_it() -> None:
    old = ahg.get_device(0)
    null = old.null_stream
    ahg.configure_devices(1)
    assert not null.alive
    assert old.statistics().implicit_streams == 0


def test_can_access_peer_refuses_a_replaced_device_on_either_side() -> None:
    ahg.configure_devices(2)
    old0, old1 = ahg.get_device(0), ahg.get_device(1)
    ahg.configure_devices(2)
    new0, new1 = ahg.get_device(0), ahg.get_device(1)
    for device, peer in ((new0, old1), (old0, new1), (old0, 1), (old0, old1)):
        with pytest.raises(ahg.InvalidDevice, match="no longer"):
            device.can_access_peer(peer)
    # The configured devices answer as before: every other device yes, itself no.
    assert new0.can_access_peer(new1)
    assert new0.can_access_peer(1)
    assert not new0.can_access_peer(new0)
    assert not new0.can_access_peer(0)
    # The rules enable_peer_access already had: the answer agrees with what it allows.
    with pytest.raises(ahg.InvalidDevice, match="no longer"):
        new0.enable_peer_access(old1)


def test_a_symbol_is_not_loaded_on_a_replaced_device() -> None:
    symbol = ahg.device_symbol("test_device_replaced_calls.table", dtype=np.int32, shape=(4,))
    old = ahg.get_device(0)
    ahg.configure_devices(1)
    for call in (lambda: symbol.address(old), lambda: symbol.view(old)):
        with pytest.raises(ahg.InvalidDevice, match="no longer"):
            call()
    assert old.statistics().memory.allocations == 0
    assert old.statistics().memory.static_allocations == 0
    new = ahg.get_device(0)
    assert symbol.address(new) == symbol.address(0)
    assert symbol.view(new).shape == (4,)


@pytest.mark.asyncio
async def test_a_peer_copy_names_its_devices_explicitly() -> None:
    """``memcpy_peer`` took None for "the current device" and a replaced Device for its
    ordinal's successor; HIP's device arguments are ordinals of configured devices."""
    ahg.configure_devices(2)
    old1 = ahg.get_device(1)
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    a, b = d0.malloc(64), d1.malloc(64)
    stream = d0.create_stream()
    with pytest.raises(TypeError, match="dst_device must be a Device or an ordinal"):
        await stream.memcpy_peer(a + 8, None, a, 0, 8)
    with pytest.raises(TypeError, match="src_device must be a Device or an ordinal"):
        await stream.memcpy_peer(b, 1, a, None, 8)
    with pytest.raises(ahg.InvalidDevice, match="no longer"):
        await stream.memcpy_peer(b, old1, a, 0, 8)
    assert stream.statistics().submitted == 0
    await stream.memcpy_peer(b, d1, a, 0, 8)  # configured devices, by object or ordinal
    await stream.memcpy_peer(b, 1, a, d0, 8)
    await stream.synchronize()
    stream.destroy()
    d0.free(a)
    d1.free(b)
