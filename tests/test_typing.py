"""Kernel parameter types are static types too, and the typed user code runs as written.

``make lint`` runs ``mypy --strict`` over ``tests/typed/``: ``user_code.py`` (a program written
the way users write one) and ``user_surface.py`` (every public name, called as the docs show,
with the return types users rely on pinned by ``assert_type``, and the wrong calls that the
annotations must refuse marked ``# type: ignore[code]``). The tests here run both files, so
each is both type-checked and executed.
"""

from __future__ import annotations

import runpy
import typing
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args, get_origin

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.device.kernel_args import PointerType, ScalarType, arg_type_of
from ahipgraph.exec.instantiate import _OPTIONS

USER_CODE = Path(__file__).resolve().parent / "typed" / "user_code.py"
USER_SURFACE = USER_CODE.with_name("user_surface.py")

SCALARS = {
    "int8": (ahg.int8, int),
    "int16": (ahg.int16, int),
    "int32": (ahg.int32, int),
    "int64": (ahg.int64, int),
    "uint8": (ahg.uint8, int),
    "uint16": (ahg.uint16, int),
    "uint32": (ahg.uint32, int),
    "uint64": (ahg.uint64, int),
    "float32": (ahg.float32, float),
    "float64": (ahg.float64, float),
}


@pytest.mark.asyncio
async def test_typed_user_code_runs() -> None:
    namespace = runpy.run_path(str(USER_CODE), run_name="user_code")
    await namespace["main"]()


@pytest.mark.parametrize("name", sorted(SCALARS))
def test_scalar_types_are_annotated_python_numbers(name: str) -> None:
    declared, python_type = SCALARS[name]
    assert get_origin(declared) is Annotated
    assert get_args(declared)[0] is python_type  # what the body receives
    arg_type = arg_type_of(declared)
    assert isinstance(arg_type, ScalarType)
    assert arg_type.name == name
    assert f"ahg.{name}" in repr(declared)


def test_ptr_is_a_generic_alias_over_a_scalar_type() -> None:
    declared = ahg.Ptr[ahg.float32]
    assert get_origin(declared) is ahg.Ptr
    assert get_args(declared) == (ahg.float32,)
    assert issubclass(ahg.Ptr, np.ndarray)  # what a type checker sees a body index and assign
    assert arg_type_of(declared) == PointerType(typing.cast(ScalarType, arg_type_of(ahg.float32)))
    element = TypeVar("element", bound=float)
    assert get_args(ahg.Ptr[element]) == (element,)  # usable in generic helpers
    for bad in (int, np.float32, "float32", ahg.Ptr[ahg.int8]):
        with pytest.raises(TypeError, match="scalar type"):
            ahg.Ptr[bad]


def test_annotations_that_declare_no_argument_type() -> None:
    for annotation in (int, float, np.ndarray, Annotated[int, "int32"], "ahg.int32", None):
        assert arg_type_of(annotation) is None


def test_string_and_evaluated_annotations_give_the_same_layout() -> None:
    def evaluated(t: ahg.Threads, n: Any, x: Any) -> None:
        pass

    def as_strings(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.float32]) -> None:
        pass

    evaluated.__annotations__ = {"n": ahg.int32, "x": ahg.Ptr[ahg.float32], "return": None}
    assert isinstance(as_strings.__annotations__["n"], str)  # this module postpones annotations
    layouts = [ahg.Kernel(body).layout for body in (evaluated, as_strings)]
    assert layouts[0].types == layouts[1].types
    assert layouts[0].offsets == layouts[1].offsets == (0, 8)


def test_type_hints_of_a_kernel_body_resolve_with_their_metadata() -> None:
    namespace = runpy.run_path(str(USER_CODE), run_name="user_code")
    saxpy: ahg.Kernel = namespace["saxpy"]
    hints = typing.get_type_hints(saxpy.body, include_extras=True)
    assert hints["n"] == ahg.int32
    assert hints["x"] == ahg.Ptr[ahg.float32]
    assert [arg_type_of(hints[name]) for name in saxpy.layout.names] == list(saxpy.layout.types)


@pytest.mark.asyncio
async def test_bodies_receive_python_scalars_and_numpy_views(device: ahg.Device) -> None:
    seen: list[Any] = []

    @ahg.kernel
    def record(t: ahg.Threads, n: ahg.int64, a: ahg.float32, x: ahg.Ptr[ahg.uint16]) -> None:
        seen.extend((n, a, x))

    ptr = device.malloc(16)
    stream = device.create_stream()
    await stream.launch_kernel(record, 1, 1, (3, 1.5, ptr))
    await stream.synchronize()
    n, a, x = seen
    assert (type(n), type(a)) == (int, float)
    assert type(x) is np.ndarray  # a plain view, not a Ptr instance
    assert (x.dtype, x.shape) == (np.uint16, (8,))
    stream.destroy()
    device.free(ptr)


def test_typed_surface_runs() -> None:
    """``tests/typed/user_surface.py`` calls every public name as the docs show it: each of
    those calls runs as written, and each call it marks as wrong is refused at run time too."""
    namespace = runpy.run_path(str(USER_SURFACE), run_name="user_surface")
    namespace["run"]()


def test_instantiate_options_name_every_option_instantiate_takes() -> None:
    """``ahg.InstantiateOptions`` (what ``mypy`` checks ``graph.instantiate(**options)``
    against) and the options the call accepts at run time are the same names."""
    hints = typing.get_type_hints(ahg.InstantiateOptions)
    assert set(hints) == {"device", *_OPTIONS}
    assert ahg.InstantiateOptions.__optional_keys__ == frozenset(hints)
    assert hints["device"] is ahg.Device
    assert hints["upload_stream"] == ahg.Stream | ahg.PerThreadStream | None


def test_typed_surface_reads_every_public_name() -> None:
    """The typed surface reads each exported name as ``ahg.<name>``, so ``mypy --strict``
    checks that every one resolves (a missing re-export fails the lint)."""
    namespace = runpy.run_path(str(USER_SURFACE), run_name="user_surface")
    for module, table in ((ahg, namespace["PUBLIC_NAMES"]), (testing, namespace["TESTING_NAMES"])):
        assert sorted(table) == sorted(module.__all__)
        assert all(table[name] is getattr(module, name) for name in module.__all__)
