"""Loading a `bench/` script as a module, so a test can call its functions and check its report.

The benches are scripts, not a package: each is loaded from its file under its own module name.
Their sibling imports (`scale`, `results_file`) resolve because each script puts `bench/` on
`sys.path` itself.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).parents[1] / "bench"


def load_bench(script: str, module_name: str) -> ModuleType:
    """``bench/<script>`` loaded as the module ``module_name``."""
    spec = importlib.util.spec_from_file_location(module_name, BENCH / script)
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench
