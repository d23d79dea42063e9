"""Float kernel arguments: a finite value past the slot's range is a ValueError whatever its
type, while NaN and infinities pass through as the bits a float slot holds."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg


@ahg.kernel
def takes_floats(t: ahg.Threads, x: ahg.float32, y: ahg.float64) -> None:
    pass


def _pack(x: Any, y: Any) -> tuple[float, float]:
    raw = takes_floats.pack((x, y))
    return struct.unpack_from("<f4xd", raw)  # type: ignore[return-value]


@pytest.mark.parametrize("slot", [0, 1])
def test_a_finite_long_double_past_float64_is_out_of_range(slot: int) -> None:
    """``float()`` of such a value is an infinity: it was sent as inf, unlike a finite value
    past float32's range, which was always refused."""
    huge = np.longdouble("1e4000")
    if not np.isfinite(huge):  # pragma: no cover - a platform whose long double is float64
        pytest.skip("long double is no wider than float64 here")
    args: list[Any] = [0.0, 0.0]
    args[slot] = -huge if slot else huge
    with pytest.raises(ValueError, match="out of range"):
        takes_floats.pack(args)


def test_infinities_and_nan_of_any_type_pass_through() -> None:
    for inf in (math.inf, np.float32(np.inf), np.float64(np.inf), np.longdouble(np.inf)):
        assert _pack(inf, -inf) == (math.inf, -math.inf)
    x, y = _pack(np.longdouble(np.nan), np.float32(np.nan))
    assert math.isnan(x)
    assert math.isnan(y)


def test_numpy_floats_within_range_keep_their_value() -> None:
    assert _pack(np.float64(1.5), np.longdouble(2.25)) == (1.5, 2.25)
    assert _pack(np.float16(0.5), np.float32(0.25)) == (0.5, 0.25)
