"""Kernels whose parameter annotations are strings (``from __future__ import annotations``):
they are evaluated when the kernel is declared, and one that cannot be is a TypeError naming
the kernel."""

from __future__ import annotations

from typing import Any

import pytest

import ahipgraph as ahg


def misspelt_type(t: ahg.Threads, n: ahg.int33) -> None:  # type: ignore[name-defined]
    pass


def unknown_name(t: ahg.Threads, n: no_such_type) -> None:  # type: ignore[name-defined]  # noqa: F821
    pass


def good(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.float32]) -> None:
    pass


@pytest.mark.parametrize(
    ("body", "cause"), [(misspelt_type, AttributeError), (unknown_name, NameError)]
)
def test_an_annotation_that_cannot_be_evaluated_is_a_type_error(body: Any, cause: type) -> None:
    with pytest.raises(TypeError, match=f"kernel '{body.__name__}'.*cannot be evaluated") as info:
        ahg.kernel(body)
    assert isinstance(info.value.__cause__, cause)


def test_string_annotations_that_evaluate_declare_the_kernel() -> None:
    declared = ahg.kernel(good)
    assert declared.layout.names == ("n", "x")
    assert repr(declared) == "<Kernel good(n: ahg.int32, x: ahg.Ptr[float32])>"
