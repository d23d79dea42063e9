"""Kernel launch attributes: priority, cooperative launch and the L2 access-policy window.

HIP keeps these beside a kernel node's parameters (``hipGraphKernelNodeSetAttribute``,
``hipKernelNodeAttrValue``); here they live in the node's :class:`KernelParams` (``priority`` and
``attributes``), so a clone, a child-graph copy, an executable's snapshot and ``exec.update`` carry
them with no extra book-keeping. This module owns the values and HIP's checks; the node and
executable methods are thin calls into :mod:`ahipgraph.graph.attributes`.

HIP's checks, in its order:

* an attribute id that is not one of HIP's kernel-node attributes → ``InvalidValue``;
* priority outside the device's stream-priority range ``[greatest, least]`` → ``InvalidValue``;
* access-policy window: hit ratio outside [0, 1], a miss property of ``Persisting``, a property
  that is not an :class:`AccessProperty`, or more bytes than the window allows → ``InvalidValue``.

What the simulator does with them: priority orders parallel branches under
``InstantiateFlags.USE_NODE_PRIORITY``; cooperative and the window are recorded, shown by DOT
and carried everywhere, but change no timing (the cost model has no L2 cache).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from ..core.errors import InvalidValue
from ..core.ints import as_int, flag_or_none, is_bool
from ..device.pointer import DevicePtr

if TYPE_CHECKING:
    from .params import KernelParams

__all__ = [
    "ACCESS_POLICY_MAX_WINDOW",
    "DEFAULT_ATTRIBUTES",
    "AccessPolicyWindow",
    "AccessProperty",
    "AttributeValue",
    "KernelAttributes",
    "KernelNodeAttribute",
    "attribute_of",
    "check_attribute_id",
    "check_attributes",
    "check_attribute_value",
    "check_priority",
    "clamp_priority",
    "stream_priority_range",
    "with_attribute",
]

# HIP's stream-priority range on AMD devices: its three levels ``hip::Stream::Priority`` High
# (-1), Normal (0, a stream's default) and Low (1), so hipDeviceGetStreamPriorityRange gives
# least=1, greatest=-1 (lower is more urgent; hip-tests check that least + greatest is the
# default). Streams clamp into it, attributes must lie inside it.
_LEAST_PRIORITY = 1
_GREATEST_PRIORITY = -1

ACCESS_POLICY_MAX_WINDOW = 1 << 27
"""The largest access-policy window in bytes (``accessPolicyMaxWindowSize``, 128 MiB)."""


def stream_priority_range() -> tuple[int, int]:
    """``hipDeviceGetStreamPriorityRange``: ``(least, greatest)``, ``(1, -1)``; lower is more
    urgent, and 0 (the default) lies between."""
    return _LEAST_PRIORITY, _GREATEST_PRIORITY


def clamp_priority(priority: int) -> int:
    """A stream's priority clamped into the range (``hipStreamCreateWithPriority`` takes any
    int and clamps it, never refuses it)."""
    return max(_GREATEST_PRIORITY, min(_LEAST_PRIORITY, priority))


class KernelNodeAttribute(enum.IntEnum):
    """``hipKernelNodeAttrID`` / ``hipLaunchAttributeID``, with HIP's numbers."""

    AccessPolicyWindow = 1
    Cooperative = 2
    Priority = 8


class AccessProperty(enum.IntEnum):
    """``hipAccessProperty``: what a cache hit or miss in the window does."""

    Normal = 0
    Streaming = 1
    Persisting = 2


@dataclass(frozen=True, slots=True)
class AccessPolicyWindow:
    """``hipAccessPolicyWindow``: a range of memory and how the L2 cache should treat it."""

    base_ptr: DevicePtr | None = None
    num_bytes: int = 0
    hit_ratio: float = 0.0
    hit_prop: AccessProperty = AccessProperty.Normal
    miss_prop: AccessProperty = AccessProperty.Normal


@dataclass(frozen=True, slots=True)
class KernelAttributes:
    """The kernel-node attributes other than priority (which is a field of KernelParams)."""

    cooperative: bool = False
    access_policy_window: AccessPolicyWindow = AccessPolicyWindow()


DEFAULT_ATTRIBUTES = KernelAttributes()

# What reading a kernel node's attribute gives: the priority an int, cooperative a bool, the
# access-policy window an AccessPolicyWindow (the getters' overloads pick one by attribute).
AttributeValue: TypeAlias = int | bool | AccessPolicyWindow


def check_attribute_id(attr: Any) -> KernelNodeAttribute:
    """The attribute named by ``attr``.

    Raises:
        InvalidValue: an int that is not a kernel-node attribute. TypeError: not an int.
    """
    checked = as_int(attr, "attribute", expected="an ahg.KernelNodeAttribute")
    try:
        return KernelNodeAttribute(checked)
    except ValueError:
        raise InvalidValue(f"{attr!r} is not a kernel node attribute") from None


def check_priority(priority: Any) -> int:
    """A priority inside the device's range.

    Raises:
        TypeError: not an int. InvalidValue: outside ``[greatest, least]``.
    """
    checked = as_int(priority, "priority")
    if not _GREATEST_PRIORITY <= checked <= _LEAST_PRIORITY:
        raise InvalidValue(
            f"priority {checked} is outside the device's range "
            f"[{_GREATEST_PRIORITY}, {_LEAST_PRIORITY}] (lower is more urgent)"
        )
    return checked


def _check_property(value: Any, what: str) -> AccessProperty:
    checked = as_int(value, what, expected="an ahg.AccessProperty")
    try:
        return AccessProperty(checked)
    except ValueError:
        raise InvalidValue(f"{what} {value!r} is not an access property") from None


def check_window(window: Any) -> AccessPolicyWindow:
    """An access-policy window that passes HIP's checks.

    Raises:
        TypeError: not an AccessPolicyWindow, or fields of the wrong type.
        InvalidValue: hit ratio outside [0, 1] (or NaN), a Persisting miss property, a
            negative size or one above :data:`ACCESS_POLICY_MAX_WINDOW`, a bad property.
    """
    if not isinstance(window, AccessPolicyWindow):
        raise TypeError(f"expected an ahg.AccessPolicyWindow, got {window!r}")
    if window.base_ptr is not None and not isinstance(window.base_ptr, DevicePtr):
        raise TypeError(f"base_ptr must be a DevicePtr or None, got {window.base_ptr!r}")
    size: Any = window.num_bytes
    size = as_int(size, "num_bytes")
    if not 0 <= size <= ACCESS_POLICY_MAX_WINDOW:
        raise InvalidValue(f"num_bytes {size} outside [0, {ACCESS_POLICY_MAX_WINDOW}]")
    ratio: Any = window.hit_ratio
    # Any real number, Python's or numpy's, as every other numeric argument; a bool is none.
    if is_bool(ratio) or not isinstance(ratio, int | float | np.integer | np.floating):
        raise TypeError(f"hit_ratio must be a number, got {ratio!r}")
    # Compared as given, before any float(): NaN fails both bounds, and an int too large for
    # a float is out of range here rather than an OverflowError from the conversion.
    if not 0 <= ratio <= 1:
        raise InvalidValue(f"hit_ratio {ratio} outside [0, 1]")
    hit = _check_property(window.hit_prop, "hit_prop")
    miss = _check_property(window.miss_prop, "miss_prop")
    if miss is AccessProperty.Persisting:
        raise InvalidValue("the miss property cannot be Persisting")
    return AccessPolicyWindow(window.base_ptr, size, float(ratio), hit, miss)


def check_attribute_value(attr: KernelNodeAttribute, value: Any) -> Any:
    """``value`` checked for ``attr`` (normalised: a bool, an int or a window)."""
    if attr is KernelNodeAttribute.Priority:
        return check_priority(value)
    if attr is KernelNodeAttribute.Cooperative:
        flag = flag_or_none(value)  # HIP takes any non-zero as true
        if flag is None:
            raise TypeError(f"cooperative must be a bool, got {value!r}")
        return bool(flag)
    return check_window(value)


def check_attributes(attributes: Any) -> KernelAttributes:
    """A whole :class:`KernelAttributes` record (one a caller may have built by hand)."""
    if not isinstance(attributes, KernelAttributes):
        raise TypeError(f"expected ahg.KernelAttributes, got {attributes!r}")
    cooperative = check_attribute_value(KernelNodeAttribute.Cooperative, attributes.cooperative)
    window = check_window(attributes.access_policy_window)
    return KernelAttributes(cooperative, window)


def attribute_of(params: KernelParams, attr: KernelNodeAttribute) -> AttributeValue:
    """The value of ``attr`` in kernel parameters ``params``."""
    if attr is KernelNodeAttribute.Priority:
        return params.priority
    if attr is KernelNodeAttribute.Cooperative:
        return params.attributes.cooperative
    return params.attributes.access_policy_window


def with_attribute(params: Any, attr: KernelNodeAttribute, value: Any) -> Any:
    """Kernel parameters ``params`` with ``attr`` set to the checked ``value``."""
    if attr is KernelNodeAttribute.Priority:
        return replace(params, priority=value)
    if attr is KernelNodeAttribute.Cooperative:
        return replace(params, attributes=replace(params.attributes, cooperative=value))
    return replace(params, attributes=replace(params.attributes, access_policy_window=value))
