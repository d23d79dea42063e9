"""Race-checker benchmark: what the check costs when on, and that it costs nothing when off.

Figures (each the median of ``--repeat`` runs, the variants alternating):

* ``eager_us_per_op`` — an eager two-stream program (fills, copies and kernels joined by
  events, one host synchronisation per round), per operation: check off, and inside
  ``ahg.race_check()``; target: on <= 3x off;
* ``launch_host_us`` — host time of ``await exec.launch(stream)`` of a 100-node graph: off and
  on (one summary check per launch);
* ``instantiate_us_per_node`` — ``instantiate()`` of a 1,000-node graph with pointer kernels,
  without and with ``check_races=True``; target: with <= 2x without.

"Check off: no movement" is shown by running the same script against the source tree before
the checker's hook points (``--compare-src PATH``, e.g. a ``git archive`` of the base commit):
the off figures of both trees are printed side by side.

Prints a table and writes JSON (``--json PATH``).

``--clock cpu`` times with the process's CPU clock instead of the wall clock: on a machine
shared with other work, a run that was descheduled mid-sample no longer inflates one side
of a ratio (the program is single-threaded, so without contention the two clocks agree).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import ahipgraph as ahg

ROUNDS = 200  # eager rounds of 6 operations
_now = time.perf_counter  # --clock cpu: time.process_time
GRAPH_NODES = 100
INSTANTIATE_NODES = 1000


@ahg.kernel
def touch(t: ahg.Threads, x: ahg.Ptr[ahg.float32], n: ahg.int32) -> None:
    """Does nothing: the cost measured is the runtime's and the checker's."""


def _checking(on: bool) -> Any:
    race_check = getattr(ahg, "race_check", None)
    if on and race_check is not None:
        return race_check(on_race="raise")
    import contextlib

    return contextlib.nullcontext()


async def eager_program(device: ahg.Device, on: bool) -> float:
    """Per-op host time of an ordered two-stream program."""
    a, b = device.malloc(4096), device.malloc(4096)
    host = np.ones(1024, np.float32)
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    event = device.create_event()
    ops = 0
    with _checking(on):
        start = _now()
        for i in range(ROUNDS):
            await s1.memcpy(a, host)
            await s1.launch_kernel(touch, 1, 1, (a, i))
            await s1.record_event(event)
            await s2.wait_event(event)
            await s2.memset(b, 0, 4096)
            await s2.launch_kernel(touch, 1, 1, (b, i))
            ops += 6
            if i % 20 == 19:
                await device.synchronize()
        await device.synchronize()
        elapsed = _now() - start
    for s in (s1, s2):
        s.destroy()
    device.free(a)
    device.free(b)
    return elapsed / ops * 1e6


def chain(size: int, x: ahg.DevicePtr) -> ahg.Graph:
    graph = ahg.Graph()
    previous: tuple[Any, ...] = ()
    for i in range(size):
        previous = (graph.add_kernel_node(touch, 1, 1, (x + 4 * (i % 64), i), deps=previous),)
    return graph


async def launch_host(device: ahg.Device, on: bool) -> float:
    x = device.malloc(4096)
    graph = chain(GRAPH_NODES, x)
    exe = graph.instantiate()
    stream = device.create_stream()
    samples = []
    with _checking(on):
        for _ in range(20):
            done = None
            for _ in range(8):
                start = _now()
                done = await exe.launch(stream)
                samples.append(_now() - start)
            assert done is not None
            await done
    await stream.synchronize()
    exe.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)
    return statistics.median(samples) * 1e6


def instantiate(device: ahg.Device, check: bool) -> float:
    x = device.malloc(4096)
    graph = chain(INSTANTIATE_NODES, x)
    start = _now()
    exe = graph.instantiate(check_races=True) if check else graph.instantiate()
    elapsed = _now() - start
    exe.destroy()
    graph.destroy()
    device.free(x)
    return elapsed / INSTANTIATE_NODES * 1e6


def measure(repeat: int, with_check: bool) -> dict[str, float]:
    device = ahg.get_device(0)
    runs: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        runs.setdefault(key, []).append(value)

    for _ in range(repeat):
        add("eager_us_per_op_off", asyncio.run(eager_program(device, False)))
        add("launch_host_us_off", asyncio.run(launch_host(device, False)))
        add("instantiate_us_per_node", instantiate(device, False))
        if with_check:
            add("eager_us_per_op_on", asyncio.run(eager_program(device, True)))
            add("launch_host_us_on", asyncio.run(launch_host(device, True)))
            add("instantiate_check_us_per_node", instantiate(device, True))
    return {key: round(statistics.median(values), 3) for key, values in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--compare-src", type=Path, help="a source tree without the checker")
    parser.add_argument("--off-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="cpu: process CPU time"
    )
    args = parser.parse_args()
    if args.clock == "cpu":
        global _now
        _now = time.process_time
    if args.off_only:  # run inside the comparison tree
        print(json.dumps(measure(args.repeat, with_check=False)))
        return
    figures = measure(args.repeat, with_check=True)
    result: dict[str, Any] = {"clock": args.clock, "repeat": args.repeat, "figures": figures}
    result["ratios"] = {
        "eager_on_over_off": round(
            figures["eager_us_per_op_on"] / figures["eager_us_per_op_off"], 2
        ),
        "launch_on_over_off": round(
            figures["launch_host_us_on"] / figures["launch_host_us_off"], 2
        ),
        "instantiate_check_over_plain": round(
            figures["instantiate_check_us_per_node"] / figures["instantiate_us_per_node"], 2
        ),
    }
    if args.compare_src is not None:
        # Both trees with the check off, each in its own process, alternating run by run.
        here = Path(__file__).resolve().parent.parent / "src"
        trees = {"off_this_tree": here, "off_base_tree": args.compare_src / "src"}
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(args.repeat):
            for name, src in trees.items():
                env = dict(os.environ, PYTHONPATH=str(src))
                env.pop("AHIPGRAPH_RACE_CHECK", None)
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--off-only",
                        "--repeat",
                        "1",
                        "--clock",
                        args.clock,
                    ],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                samples[name].append(json.loads(out.stdout))
        for name, runs in samples.items():
            result[name] = {
                key: round(statistics.median(run[key] for run in runs), 3) for key in runs[0]
            }
        this, base = result["off_this_tree"], result["off_base_tree"]
        for key in ("eager_us_per_op_off", "launch_host_us_off", "instantiate_us_per_node"):
            result["ratios"][f"{key}_this_over_base"] = round(this[key] / base[key], 2)
    print(f"{'figure':34} {'value':>10}")
    for key, value in figures.items():
        print(f"{key:34} {value:10.3f}")
    for tree in ("off_this_tree", "off_base_tree"):
        for key, value in result.get(tree, {}).items():
            print(f"{tree[4:] + ' ' + key:34} {value:10.3f}")
    print(f"{'ratio':34} {'value':>10}  target")
    targets = {
        "eager_on_over_off": "<= 3",
        "instantiate_check_over_plain": "<= 2",
        "eager_us_per_op_off_this_over_base": "~1",
        "launch_host_us_off_this_over_base": "~1",
        "instantiate_us_per_node_this_over_base": "~1",
    }
    for key, value in result["ratios"].items():
        print(f"{key:40} {value:10.2f}  {targets.get(key, '')}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
