"""``graph.instantiate``'s integer options follow the integer rule (``core/ints.py``).

``signal_sets``, ``num_sets`` and ``arena_headroom`` refused a numpy integer (``np.int64(3)``),
which every other integer argument takes; they now take it, as a plain ``int``, and still
refuse a bool, a float, a string and a device pointer with the option's ``TypeError``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg

OPTIONS = ["signal_sets", "num_sets", "arena_headroom"]


def made_with(graph: ahg.Graph, name: str, value: Any) -> tuple[int, int, int]:
    graph_exec = graph.instantiate(**{name: value})
    stats = graph_exec.statistics()
    made = (stats.signal_pool.sets, stats.signal_pool.prepopulated, stats.arena.chunk_bytes)
    graph_exec.destroy()
    return made


@pytest.mark.parametrize("name", OPTIONS)
@pytest.mark.parametrize("numpy_int", [np.int64, np.int32, np.uint8])
def test_a_numpy_integer_is_the_plain_int(device: ahg.Device, name: str, numpy_int: Any) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    assert made_with(graph, name, numpy_int(3)) == made_with(graph, name, 3)
    graph.destroy()


@pytest.mark.parametrize("name", OPTIONS)
@pytest.mark.parametrize("value", [True, np.True_, 1.0, "1", ahg.DevicePtr(0, 64)])
def test_non_integers_are_refused_and_nothing_is_built(
    device: ahg.Device, name: str, value: Any
) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    with pytest.raises(TypeError, match=f"instantiate option {name} must be int"):
        graph.instantiate(**{name: value})
    assert graph.statistics().instantiated == 0
    graph.destroy()


def test_range_checks_see_the_numpy_value(device: ahg.Device) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    with pytest.raises(ValueError, match=r"signal_sets must be in 1\.\.65536, got 0"):
        graph.instantiate(signal_sets=np.int64(0))
    with pytest.raises(ValueError, match="arena_headroom must be >= 0, got -1"):
        graph.instantiate(arena_headroom=np.int32(-1))
    graph.destroy()
