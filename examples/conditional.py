"""Conditional nodes: a Jacobi relaxation that iterates on the device until it converges.

The 1-D Laplace problem u'' = 0 on N points with u[0] = 0 and u[N-1] = 1 is relaxed by Jacobi
sweeps, ``u[i] <- (u[i-1] + u[i+1]) / 2``. The graph is

    copy u in -> WHILE(handle) { sweep (u -> v); sweep (v -> u), test, set handle } -> copy out

The sweep kernel measures the largest change and sets the WHILE node's handle through its typed
``ahg.CondHandle`` parameter, so the whole solve — however many sweeps it needs — is one launch,
with no host involvement between iterations. The result is checked against the same iteration in
numpy (identical values and sweep count) and against the exact solution, a straight line.
"""

from __future__ import annotations

import numpy as np

import ahipgraph as ahg

N = 32
TOLERANCE = 1e-6


@ahg.kernel
def sweep(t: ahg.Threads, n: ahg.int32, u: ahg.Ptr[ahg.float64],
          v: ahg.Ptr[ahg.float64]) -> None:  # fmt: skip
    """One Jacobi sweep from ``u`` into ``v`` (the boundary points are copied)."""
    v[0], v[n - 1] = u[0], u[n - 1]
    v[1 : n - 1] = (u[0 : n - 2] + u[2:n]) / 2


@ahg.kernel
def sweep_and_test(t: ahg.Threads, n: ahg.int32, tolerance: ahg.float64,
                   v: ahg.Ptr[ahg.float64], u: ahg.Ptr[ahg.float64],
                   sweeps: ahg.Ptr[ahg.int64], again: ahg.CondHandle) -> None:  # fmt: skip
    """Sweep ``v`` back into ``u``; keep looping while anything moved more than ``tolerance``."""
    old = u[:n].copy()
    u[0], u[n - 1] = v[0], v[n - 1]
    u[1 : n - 1] = (v[0 : n - 2] + v[2:n]) / 2
    sweeps[0] += 2
    ahg.set_conditional(again, 1 if np.abs(u[:n] - old).max() > tolerance else 0)


def numpy_reference(u: np.ndarray) -> tuple[np.ndarray, int]:
    """The same iteration in numpy: pairs of sweeps until the second one moves little."""
    u = u.copy()
    sweeps = 0
    while True:
        v = u.copy()
        v[1:-1] = (u[:-2] + u[2:]) / 2
        old = u.copy()
        u = v.copy()
        u[1:-1] = (v[:-2] + v[2:]) / 2
        sweeps += 2
        if np.abs(u - old).max() <= TOLERANCE:
            return u, sweeps


async def main() -> None:
    device = ahg.get_device(0)
    stream = device.create_stream()
    start = np.zeros(N)
    start[-1] = 1.0
    result = np.zeros(N)
    sweeps_done = np.zeros(1, dtype=np.int64)
    u, v, sweeps = device.malloc(N * 8), device.malloc(N * 8), device.malloc(8)

    graph = ahg.Graph()
    again = graph.conditional_handle(default=1)  # enter the loop on every launch
    load = graph.add_memcpy_node(u, start)
    zero = graph.add_memset_node(sweeps, 0, 8, deps=[load])
    _, (body,) = graph.add_conditional_node(again, ahg.ConditionalKind.While, deps=[zero])
    first = body.add_kernel_node(sweep, 1, 1, (N, u, v))
    body.add_kernel_node(sweep_and_test, 1, 1, (N, TOLERANCE, v, u, sweeps, again), deps=[first])
    (loop,) = [n for n in graph.nodes() if n.type is ahg.NodeType.Conditional]
    store = graph.add_memcpy_node(result, u, deps=[loop])
    graph.add_memcpy_node(sweeps_done, sweeps, deps=[store])

    graph_exec = graph.instantiate()
    expected, expected_sweeps = numpy_reference(start)
    exact = np.linspace(0.0, 1.0, N)
    for _ in range(3):  # every launch solves from the start again
        result[:] = 0
        await (await graph_exec.launch(stream))
        if int(sweeps_done[0]) != expected_sweeps or not np.array_equal(result, expected):
            raise AssertionError("the device iteration differs from numpy's")
        if np.abs(result - exact).max() > 1e-3:
            raise AssertionError("the relaxation did not converge to the straight line")
    graph_exec.destroy()
    graph.destroy()
    for ptr in (u, v, sweeps):
        device.free(ptr)
    stream.destroy()
    print(
        f"jacobi n={N}: converged after {int(sweeps_done[0])} sweeps in one launch; "
        f"matches numpy, max |error| vs exact {np.abs(result - exact).max():.2e}"
    )


if __name__ == "__main__":
    ahg.run(main())
