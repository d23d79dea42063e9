"""``enable_peer_access`` checks its flags before the peer, as ``hipDeviceEnablePeerAccess``.

HIP returns ``hipErrorInvalidValue`` for non-zero flags before it asks whether the peer can be
accessed, so a call with bad flags and a bad peer (itself, an unknown ordinal, a peer already
enabled) is ``InvalidValue``, and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ahipgraph as ahg
from ahipgraph.testing import fresh_devices


@pytest.fixture
def devices() -> Iterator[list[ahg.Device]]:
    with fresh_devices(2) as made:
        yield made


def test_bad_flags_come_before_a_bad_peer(devices: list[ahg.Device]) -> None:
    d0, d1 = devices
    for peer in (d0, 0, 7, -1):
        with pytest.raises(ahg.InvalidValue, match="flags"):
            d0.enable_peer_access(peer, flags=1)
    d0.enable_peer_access(d1)
    with pytest.raises(ahg.InvalidValue, match="flags"):
        d0.enable_peer_access(d1, flags=2)  # not PeerAccessAlreadyEnabled
    d0.disable_peer_access(d1)
    with pytest.raises(ahg.PeerAccessNotEnabled):
        d0.disable_peer_access(d1)  # the refused calls enabled nothing
