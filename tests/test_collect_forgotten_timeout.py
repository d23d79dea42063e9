"""The timeout of ``ahg.collect_forgotten(timeout)``.

The timeout was only looked at when a forgotten handle was being freed, so the same bad
argument passed silently on a quiet program and failed on a busy one: ``"x"`` a TypeError from
inside ``threading``, ``True`` taken as one second, NaN a ``TimeoutError``, and ``math.inf``
(the natural "wait as long as it takes") an ``OverflowError``.
"""

from __future__ import annotations

import gc
import math
import warnings
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg


def _forget_a_graph() -> None:
    """Leave a handle for the releaser thread, so that collect_forgotten has work to wait on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        graph = ahg.Graph()
        graph.add_empty_node()
        del graph
        gc.collect()


@pytest.mark.parametrize("busy", [False, True], ids=["quiet", "busy"])
@pytest.mark.parametrize("timeout", [True, np.True_, "1", b"1", 1j, [1]], ids=repr)
def test_a_timeout_that_is_no_number_is_a_type_error_busy_or_not(busy: bool, timeout: Any) -> None:
    if busy:
        _forget_a_graph()
    with pytest.raises(TypeError, match="timeout must be a number of seconds"):
        ahg.collect_forgotten(timeout)
    ahg.collect_forgotten()  # what was forgotten is still freed by the next good call


@pytest.mark.parametrize("busy", [False, True], ids=["quiet", "busy"])
@pytest.mark.parametrize("timeout", [-1, -0.5, math.nan], ids=repr)
def test_a_negative_or_nan_timeout_is_a_value_error_busy_or_not(busy: bool, timeout: Any) -> None:
    if busy:
        _forget_a_graph()
    with pytest.raises(ValueError, match="non-negative"):
        ahg.collect_forgotten(timeout)
    ahg.collect_forgotten()


@pytest.mark.parametrize("timeout", [math.inf, 10**400, None, 5, 2.5, np.float64(5), np.int64(5)])
def test_an_unbounded_or_plain_timeout_waits_for_the_release(timeout: Any) -> None:
    freed: list[object] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        ahg.UserObject(freed.append, "data")  # dropped at once: the releaser runs its destructor
        gc.collect()
    ahg.collect_forgotten(timeout)
    assert freed == ["data"]
