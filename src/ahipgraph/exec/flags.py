"""Instantiate flags (``hipGraphInstantiateFlags``) and update results.

Update results mirror ``hipGraphExecUpdateResult``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.errors import InvalidValue
from ..core.ints import as_int

if TYPE_CHECKING:
    from ..graph.node import GraphNode

__all__ = ["InstantiateFlags", "UpdateResult", "UpdateResultKind", "check_instantiate_flags"]


class InstantiateFlags(enum.IntFlag):
    """HIP's instantiate flags. HIP accepts exactly one of them (or none) per call."""

    NONE = 0
    AUTO_FREE_ON_LAUNCH = 1
    UPLOAD = 2
    DEVICE_LAUNCH = 4
    USE_NODE_PRIORITY = 8


_ACCEPTED = {0, 1, 2, 4, 8}


def check_instantiate_flags(flags: int) -> InstantiateFlags:
    """Validate flags as ``hipGraphInstantiateWithParams`` does: the whole value is compared,
    so a combination of flags is rejected.

    Raises:
        InvalidValue: anything but 0, AUTO_FREE_ON_LAUNCH, UPLOAD, DEVICE_LAUNCH, USE_NODE_PRIORITY.
    """
    checked = as_int(flags, "flags", expected="an int or InstantiateFlags")
    if checked not in _ACCEPTED:
        raise InvalidValue(f"unsupported instantiate flags {flags!r} (HIP accepts one at a time)")
    return InstantiateFlags(checked)


class UpdateResultKind(enum.IntEnum):
    """``hipGraphExecUpdateResult``."""

    Success = 0
    Error = 1
    TopologyChanged = 2
    NodeTypeChanged = 3
    FunctionChanged = 4
    ParametersChanged = 5
    NotSupported = 6
    UnsupportedFunctionChange = 7
    AttributesChanged = 8


@dataclass(frozen=True, slots=True)
class UpdateResult:
    """What ``GraphExec.update`` found: the kind, and the node of the new graph it concerns."""

    kind: UpdateResultKind
    node: GraphNode | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.kind is UpdateResultKind.Success
