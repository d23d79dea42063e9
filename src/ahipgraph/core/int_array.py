"""``IntArray``: how annotations spell ``array.array`` of ints.

The executable keeps its plan and its copy of the graph as integer columns
(``array("q")``/``array("i")``), annotated ``array[int]`` for the type checker. Under
``from __future__ import annotations`` that text is evaluated only when something asks for
the hints (``typing.get_type_hints``, documentation tools), and before Python 3.12 ``array``
cannot be subscripted at run time, so asking failed with ``TypeError: type 'array.array' is
not subscriptable``. (A ``types.GenericAlias`` made by hand does not help: 3.11's
``get_type_hints`` subscripts its origin again.) Annotations use this alias instead: to the
type checker it is ``array[int]``; at run time it is ``array`` itself, which is what the
column is.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

__all__ = ["IntArray"]

if TYPE_CHECKING:
    from typing import TypeAlias

    IntArray: TypeAlias = array[int]
else:
    IntArray = array
