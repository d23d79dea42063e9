"""``ahipgraph.__version__``, read from the installed package's metadata.

``pyproject.toml`` is the single place the version is written; an installed (or editable)
package reports it through :mod:`importlib.metadata`. Source imported without being installed
has no metadata, and reports ``0+unknown`` rather than a number that could be wrong.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("ahipgraph")
except PackageNotFoundError:  # pragma: no cover - only when running from an uninstalled tree
    __version__ = "0+unknown"
