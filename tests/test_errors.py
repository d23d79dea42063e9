"""The error hierarchy: one HipError subclass per HIP code, looked up by code."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.core.errors import error_class

# The numbers DESIGN.md fixes (HIP's own values).
HIP_NUMBERS = {
    "InvalidValue": 1,
    "OutOfMemory": 2,
    "InvalidConfiguration": 9,
    "InvalidDevicePointer": 17,
    "InvalidMemcpyDirection": 21,
    "InvalidDeviceFunction": 98,
    "InvalidDevice": 101,
    "OperatingSystem": 304,
    "InvalidHandle": 400,
    "IllegalState": 401,
    "NotReady": 600,
    "ContextIsDestroyed": 709,
    "LaunchFailure": 719,
    "NotSupported": 801,
    "StreamCaptureUnsupported": 900,
    "StreamCaptureInvalidated": 901,
    "StreamCaptureMerge": 902,
    "StreamCaptureUnmatched": 903,
    "StreamCaptureUnjoined": 904,
    "StreamCaptureIsolation": 905,
    "StreamCaptureImplicit": 906,
    "CapturedEvent": 907,
    "StreamCaptureWrongThread": 908,
    "GraphExecUpdateFailure": 910,
    "Unknown": 999,
}

ERROR_CODES = [code for code in ahg.ErrorCode if code is not ahg.ErrorCode.Success]


@pytest.mark.parametrize(("name", "number"), sorted(HIP_NUMBERS.items()))
def test_error_codes_use_hips_numbers(name: str, number: int) -> None:
    assert ahg.ErrorCode[name] == number


def test_success_is_zero_and_named_hip_success() -> None:
    assert ahg.ErrorCode.Success == 0
    assert ahg.ErrorCode.Success.hip_name == "hipSuccess"
    assert ahg.ErrorCode.InvalidValue.hip_name == "hipErrorInvalidValue"


@pytest.mark.parametrize("code", ERROR_CODES, ids=lambda c: c.name)
def test_every_error_code_has_its_own_public_subclass(code: ahg.ErrorCode) -> None:
    cls = error_class(code)
    assert issubclass(cls, ahg.HipError)
    assert cls is not ahg.HipError
    assert cls.code is code
    # Every class is exported from the package under a name users can catch.
    assert cls.__name__ in ahg.__all__
    assert getattr(ahg, cls.__name__) is cls
    # Looking up by the plain integer gives the same class.
    assert error_class(int(code)) is cls


def test_error_classes_are_distinct() -> None:
    classes = [error_class(code) for code in ERROR_CODES]
    assert len(set(classes)) == len(classes)


@pytest.mark.parametrize("code", [3, 12345, -1])
def test_error_class_maps_unknown_numbers_to_unknown(code: int) -> None:
    # 3 is a real HIP code too (NotInitialized); only unlisted numbers fall back.
    expected = ahg.NotInitialized if code == 3 else ahg.Unknown
    assert error_class(code) is expected


def test_error_class_refuses_success() -> None:
    with pytest.raises(ValueError, match="hipSuccess"):
        error_class(ahg.ErrorCode.Success)
    with pytest.raises(ValueError, match="hipSuccess"):
        error_class(0)


def test_from_code_builds_the_registered_subclass_with_the_message() -> None:
    error = ahg.HipError.from_code(ahg.ErrorCode.NotReady, "still running")
    assert type(error) is ahg.NotReady
    assert error.code is ahg.ErrorCode.NotReady
    assert error.message == "still running"
    assert str(error) == "hipErrorNotReady: still running"


def test_message_is_optional() -> None:
    assert str(ahg.InvalidHandle()) == "hipErrorInvalidHandle"
    assert ahg.InvalidHandle().message == ""


def test_subclasses_are_caught_as_hip_error_not_as_python_misuse() -> None:
    with pytest.raises(ahg.HipError) as info:
        raise ahg.StreamCaptureInvalidated("capture broken")
    assert info.value.code == 901
    assert not isinstance(info.value, TypeError | ValueError)


@pytest.mark.parametrize("clone", [copy.copy, lambda e: pickle.loads(pickle.dumps(e))])
def test_copied_and_pickled_errors_keep_class_and_message(clone: object) -> None:
    error = ahg.LaunchFailure("kernel 'k' failed")
    again = clone(error)  # type: ignore[operator]
    assert type(again) is ahg.LaunchFailure
    assert again.message == "kernel 'k' failed"
    assert str(again) == str(error) == "hipErrorLaunchFailure: kernel 'k' failed"


def test_a_code_builds_its_own_error_class() -> None:
    """``HipError(code[, message])`` is the code's class, as ``OSError(errno, ...)`` is."""
    error = ahg.HipError(ahg.ErrorCode.NotReady)
    assert type(error) is ahg.NotReady
    assert str(error) == "hipErrorNotReady"
    assert error.message == ""
    error = ahg.HipError(ahg.ErrorCode.InvalidValue, "bad size")
    assert type(error) is ahg.InvalidValue
    assert str(error) == "hipErrorInvalidValue: bad size"
    assert pickle.loads(pickle.dumps(error)).message == "bad size"
    assert str(ahg.NotReady(ahg.ErrorCode.NotReady, "m")) == "hipErrorNotReady: m"


@pytest.mark.parametrize(
    ("cls", "args", "expected"),
    [
        (ahg.InvalidValue, (ahg.ErrorCode.NotReady,), ValueError),  # another class's code
        (ahg.HipError, (ahg.ErrorCode.Success,), ValueError),  # not an error
        (ahg.HipError, (600,), TypeError),  # a bare int is no code: say so
        (ahg.HipError, (None,), TypeError),
        (ahg.HipError, ("a", "b"), TypeError),
        (ahg.HipError, (ahg.ErrorCode.NotReady, "a", "b"), TypeError),
    ],
)
def test_a_wrong_error_construction_is_refused(
    cls: type[ahg.HipError], args: tuple[Any, ...], expected: type[Exception]
) -> None:
    with pytest.raises(expected):
        cls(*args)


class DetailedError(ahg.InvalidValue):
    """A user's own error: a keyword-only constructor, as any Exception subclass may have."""

    def __init__(self, *, detail: str) -> None:
        super().__init__(f"bad detail {detail}")
        self.detail = detail


class QuietError(ahg.HipError):
    """A user's error whose constructor does not call HipError's (Exception's own allow it)."""

    def __init__(self, text: str) -> None:
        self.text = text


def test_users_subclass_errors_as_they_subclass_exception() -> None:
    """The code-picking constructor passes every argument on, as ``Exception.__new__`` takes
    them: a keyword-only subclass builds, and one that skips ``HipError.__init__`` keeps its
    arguments as ``args`` and its text, as any exception does."""
    error = DetailedError(detail="x")
    assert str(error) == "hipErrorInvalidValue: bad detail x"
    assert isinstance(error, ahg.InvalidValue)
    assert error.detail == "x"
    quiet = QuietError("why")
    assert quiet.args == ("why",)
    assert str(quiet) == "why"
