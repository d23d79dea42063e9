"""Kernels the conditional-node tests share."""

from __future__ import annotations

import ahipgraph as ahg


@ahg.kernel
def count_to(t: ahg.Threads, limit: ahg.int32, x: ahg.Ptr[ahg.int32], h: ahg.CondHandle) -> None:
    """x[0] += 1; keep looping while x[0] < limit."""
    x[0] += 1
    ahg.set_conditional(h, 1 if x[0] < limit else 0)
