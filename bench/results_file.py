"""Writing a bench's JSON results: the figures plus the Python and numpy that produced them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np


def write_results(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` (with the interpreter's and numpy's versions) as JSON to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {**payload, "python": sys.version.split()[0], "numpy": np.__version__}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {path}")
