"""Element types for viewing device memory: numpy's dtypes, and the kernel parameter types.

A kernel declares ``x: ahg.Ptr[ahg.float32]``, so the natural way to look at that memory from
the host is ``device.view(x, ahg.float32, n)``: ``ahg.float32`` is ``Annotated[float,
<ScalarType float32>]``, which numpy cannot read. :func:`element_dtype` reads the numpy dtype a
scalar parameter type carries, and turns numpy's own refusals (a ``TypeError`` for most, a
``ValueError`` for some) into one ``TypeError`` naming what was given, as the views document.
"""

from __future__ import annotations

from typing import Annotated, Any, get_origin

import numpy as np

__all__ = ["element_dtype"]


def element_dtype(dtype: Any) -> np.dtype[Any]:
    """numpy's dtype for ``dtype``: a numpy dtype or anything ``np.dtype`` takes, or a scalar
    kernel parameter type such as ``ahg.int32``.

    Raises:
        TypeError: None (numpy would quietly make it float64), a pointer type such as
            ``ahg.Ptr[ahg.float32]`` (its elements are viewed, as ``ahg.float32``), or
            anything else numpy does not take as a data type.
    """
    if dtype is None:
        raise TypeError("dtype is required")
    if get_origin(dtype) is Annotated:
        for meta in dtype.__metadata__:
            found: object = getattr(meta, "dtype", None)  # a ScalarType's (see kernel_args)
            if isinstance(found, np.dtype):
                return found
    try:
        converted: np.dtype[Any] = np.dtype(dtype)
    except (TypeError, ValueError) as exc:
        hint = ""
        if getattr(get_origin(dtype), "__module__", "").startswith("ahipgraph"):
            hint = " (a pointer type: view its elements, e.g. as ahg.float32)"
        raise TypeError(f"not a data type: {dtype!r}{hint}") from exc
    return converted
