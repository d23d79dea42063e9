"""`graph.instantiate(num_sets=n)`: the signal-set pool's own name for the sets prepopulated.

The pool is prepopulated at instantiate with `num_sets` sets: `num_sets` is accepted
as another spelling of the `signal_sets` option, with the same checks.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from cleanup import destroy


def test_num_sets_prepopulates_the_pool(device: ahg.Device) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    exec_ = graph.instantiate(num_sets=3)
    pool = exec_.statistics().signal_pool
    assert pool.prepopulated == pool.sets == pool.free == 3
    agreeing = graph.instantiate(num_sets=5, signal_sets=5)
    assert agreeing.statistics().signal_pool.prepopulated == 5
    destroy(exec_, agreeing, graph)


def test_num_sets_is_checked_like_signal_sets(device: ahg.Device) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    with pytest.raises(ValueError, match=r"num_sets must be in 1\.\.65536"):
        graph.instantiate(num_sets=0)
    with pytest.raises(TypeError, match="num_sets must be int"):
        graph.instantiate(num_sets="4")
    with pytest.raises(ValueError, match="contradicts"):
        graph.instantiate(num_sets=2, signal_sets=3)
    assert graph.statistics().instantiated == 0  # nothing was built
    destroy(graph)
