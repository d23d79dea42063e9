"""What a user coming from HIP found when using ahipgraph as its docs say, each pinned down.

Each test is named after what the user saw go wrong, and checks the behaviour HIP (or the
documentation) promises instead.
"""

from __future__ import annotations

import numpy as np

import ahipgraph as ahg
from cleanup import destroy


def test_a_pitched_copy_node_is_labelled_with_its_direction_only(device: ahg.Device) -> None:
    # HIP labels its 3D copy node "MEMCPY\n(HtoD)": its size is a shape, not a byte count
    # (only the 1D and symbol copies say "(HtoD,<bytes>)"); the table shows the shape.
    dst = device.malloc(16 * 4)
    src = np.zeros(32, np.uint8)
    graph = ahg.Graph()
    flat = graph.add_memcpy_node(dst, src[:8])
    pitched = graph.add_memcpy_3d_node(ahg.PitchedPtr(dst, 16), ahg.PitchedPtr(src, 8), (8, 4, 1))
    text = graph.to_dot()
    assert f'label="{flat.id}\\nMEMCPY\\n(HtoD,8)"' in text
    assert f'label="{pitched.id}\\nMEMCPY\\n(HtoD)"' in text
    table = graph.to_dot(ahg.DotFlags.MemcpyNodeParams)
    assert "{{src_pitch | dst_pitch | width | height | depth} | {8 | 16 | 8 | 4 | 1}}" in table
    destroy(graph, dst)
