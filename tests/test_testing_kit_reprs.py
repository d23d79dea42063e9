"""The reprs of the testing kit's objects.

The fault injectors, the held signal sets and the fakes printed as
``<ahipgraph.testing.faults.KernelFault object at 0x...>``: a failing assertion about one of
them said nothing of what it was set to do or had done. Each now says its state.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from ahipgraph.testing import (
    GatedHost,
    HeldKernel,
    exhaust_signal_sets,
    fail_allocations,
    fail_kernels,
    hang_kernels,
)


def test_fault_injectors_say_what_they_do(device: ahg.Device) -> None:
    with fail_kernels(2, name="scale") as fault:
        assert repr(fault) == "<KernelFault name='scale' left=2 hits=0>"
    with hang_kernels(None) as hang:
        assert repr(hang) == "<KernelHang name=None left=every hits=0 hanging=0>"
    with fail_allocations(1, nbytes=64) as refusal:
        with pytest.raises(ahg.OutOfMemory):
            device.malloc(64)
        assert repr(refusal) == "<AllocationFault device=None nbytes=64 left=0 hits=1>"


def test_held_sets_and_fakes_say_their_state(device: ahg.Device) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate()
    with exhaust_signal_sets(graph_exec) as held:
        assert repr(held).startswith(f"<SignalSetsHeld held={held.held} of <GraphExec")
    held_kernel = HeldKernel("k")
    assert repr(held_kernel) == "<HeldKernel 'k' runs=0 held>"
    held_kernel.release()
    assert repr(held_kernel) == "<HeldKernel 'k' runs=0 released>"
    gate = GatedHost("g")
    gate.open(1)
    assert repr(gate) == "<GatedHost 'g' runs=0 open=[1]>"
    graph_exec.destroy()
    graph.destroy()
