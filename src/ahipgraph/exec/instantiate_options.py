"""The keyword options of ``graph.instantiate``, as a type checker sees them.

``graph.instantiate(flags, **options)`` checks its options at run time (an unknown name or a
wrong type is a ``TypeError``, see :mod:`ahipgraph.exec.instantiate`); this ``TypedDict``
states the same names and types statically, so ``mypy --strict`` refuses a misspelt option
and a dict of options can be built and annotated ahead of the call
(``options: ahg.InstantiateOptions = {"signal_sets": 4}``). Every key is optional: an option
not given keeps its default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypedDict

if TYPE_CHECKING:
    from ..runtime.device import Device
    from ..runtime.per_thread import PerThreadStream
    from ..runtime.stream import Stream

__all__ = ["InstantiateOptions"]


class InstantiateOptions(TypedDict, total=False):
    """``graph.instantiate``'s keyword options; see :meth:`ahipgraph.Graph.instantiate`."""

    device: Device
    signal_sets: int
    num_sets: int
    signal_set_policy: Literal["wait", "grow"]
    wait_for_signal_sets: bool
    arena_headroom: int
    strict_flush: bool
    upload_stream: Stream | PerThreadStream | None
    check_races: bool
