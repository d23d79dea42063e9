"""Peer access between devices (``hipDeviceEnablePeerAccess`` / ``DisablePeerAccess`` /
``hipDeviceCanAccessPeer``).

Each device's memory owns a disjoint address range, so the owner of any address is known from
the address alone. A kernel running on device A that is given a pointer into device B's memory
resolves it through A's peer table: with access to B enabled the kernel reads and writes B's
memory directly (the view comes from B's allocator, so freeing there still invalidates it);
without it, dispatch fails with ``InvalidDevicePointer``, which is what a GPU without a
mapping reports as a fault. Copies between devices never need peer access (HIP stages them),
and cost what the cost model gives a peer transfer. Nor do fills (``memset``) and stream memory
operations (``write_value_*``, ``wait_value_*``) on a peer's memory, streams' and graph nodes'
alike: HIP's fill command maps the peer's memory for the queue's device by itself
(``validatePeerMemory`` calls ``deviceAllowAccess``), and ``hipStreamWriteValue32`` and
``hipStreamWaitValue32`` do not look at the pointer's device at all. Only kernels, which
dereference the pointers they are given, need ``enable_peer_access``.

Access is one-way, as in HIP: ``a.enable_peer_access(b)`` lets work on ``a`` touch ``b``.
Thread-safety: the tables change under one lock and are read lock-free (a dict lookup).
"""

from __future__ import annotations

import threading
from typing import Any

from ..core.errors import (
    InvalidDevice,
    InvalidValue,
    PeerAccessAlreadyEnabled,
    PeerAccessNotEnabled,
)
from ..core.ints import as_int
from .base import DeviceBase

__all__ = ["can_access_peer", "disable_peer_access", "enable_peer_access", "peer_of"]

_lock = threading.Lock()


def peer_of(device: DeviceBase, peer: Any) -> DeviceBase:
    """``peer`` (a Device or an ordinal) as a configured device other than ``device``.

    Raises:
        InvalidDevice: no such device, a device of an earlier configuration, or ``device``
            itself (HIP's answer for a device and itself).
        TypeError: neither a Device nor an int.
    """
    other = _configured_pair(device, peer)
    if other is device:
        raise InvalidDevice(f"device {device.ordinal} cannot be its own peer")
    return other


def _configured_pair(device: DeviceBase, peer: Any) -> DeviceBase:
    """``peer`` as a configured device, once both it and ``device`` are known to be configured.

    Raises: as :func:`peer_of`, but a device and itself pass.
    """
    from .table import configured, live

    other = configured(peer, "peer")
    live(device)
    return other


def can_access_peer(device: DeviceBase, peer: Any) -> bool:
    """``hipDeviceCanAccessPeer``: every simulated device can map every other; itself: False.

    A device of an earlier configuration, on either side, is no device at all: it is
    ``InvalidDevice`` here as in :func:`enable_peer_access`, never a "yes" for memory that
    kernels of the configured devices can no longer reach.

    Raises:
        InvalidDevice: no such device, or one ``configure_devices`` replaced.
        TypeError: not a Device or an ordinal.
    """
    return _configured_pair(device, peer) is not device


def enable_peer_access(device: DeviceBase, peer: Any, flags: int = 0) -> None:
    """Let work on ``device`` read and write ``peer``'s memory.

    Raises:
        InvalidValue: ``flags`` other than 0 (checked first, as HIP does).
        InvalidDevice: see :func:`peer_of`.
        PeerAccessAlreadyEnabled: access was already enabled (nothing changes).
    """
    flags = as_int(flags, "flags")
    if flags != 0:
        raise InvalidValue(f"peer-access flags must be 0, got {flags}")
    other = peer_of(device, peer)
    with _lock:
        peers = device.memory._peers
        if other.ordinal in peers:
            raise PeerAccessAlreadyEnabled(
                f"device {device.ordinal} already accesses device {other.ordinal}"
            )
        peers[other.ordinal] = other.memory
        other.memory._mapped_by = (*other.memory._mapped_by, device.memory)


def disable_peer_access(device: DeviceBase, peer: Any) -> None:
    """Stop work on ``device`` from touching ``peer``'s memory (work already done is not undone;
    a kernel dispatched later with a pointer there fails with ``InvalidDevicePointer``).

    Raises:
        InvalidDevice: see :func:`peer_of`. PeerAccessNotEnabled: access was not enabled.
    """
    other = peer_of(device, peer)
    with _lock:
        if device.memory._peers.pop(other.ordinal, None) is None:
            raise PeerAccessNotEnabled(
                f"device {device.ordinal} does not access device {other.ordinal}"
            )
        mine = device.memory
        other.memory._mapped_by = tuple(m for m in other.memory._mapped_by if m is not mine)
    # Views of the peer's memory that dispatch ops kept (a graph's replays keep them) must go:
    # without this, a replay after the disable still read and wrote the peer's memory.
    mine.peer_memory_changed()
