"""Fakes that make awkward timings on purpose.

They live in :mod:`ahipgraph.testing`, where users get them too; the project's tests import
them from here out of habit. See that package for what each one does.
"""

from __future__ import annotations

from ahipgraph.testing import GatedHost, HeldKernel, Interleave, loop_turns, run_together

__all__ = ["GatedHost", "HeldKernel", "Interleave", "loop_turns", "run_together"]
