"""Devices, memory, kernels, streams, events and errors, used as a HIP user would: each test
names what the call did before it was fixed."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.core.errors import error_class


@pytest.mark.parametrize("code", [True, False, 719.0, 1.0, None, "1", b"\x01", [1]])
def test_an_error_code_that_is_not_an_integer_is_a_type_error(code: object) -> None:
    """``ErrorCode(True)`` is ``InvalidValue`` and ``ErrorCode(719.0)`` is ``LaunchFailure``
    (an enum lookup by equal value), and anything else that is no member made an ``Unknown``
    error: ``from_code(True)`` built an InvalidValue and ``from_code(None)`` an Unknown
    instead of refusing the mistake, as every other integer argument does."""
    with pytest.raises(TypeError, match=r"an error code must be an int or an ahg\.ErrorCode"):
        ahg.HipError.from_code(code, "message")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="an error code must be an int"):
        error_class(code)  # type: ignore[arg-type]


def test_an_integer_error_code_still_finds_its_class() -> None:
    numpy_code: object = np.int32(719)
    assert type(ahg.HipError.from_code(numpy_code, "m")) is ahg.LaunchFailure  # type: ignore[arg-type]
    assert type(ahg.HipError.from_code(ahg.ErrorCode.NotReady)) is ahg.NotReady
    assert type(ahg.HipError.from_code(2**70)) is ahg.Unknown
    assert type(ahg.HipError.from_code(-1)) is ahg.Unknown
