"""The replay example, traced: write a timeline to open in Perfetto, and the plan's DOT.

Builds the graph of ``graph_replay.py`` (a fork and join with a child graph, copies both ways
and a host callback), replays it three times under ``ahg.tracing()`` and writes:

* ``graph_replay.trace.json`` — Chrome Trace Event format: open https://ui.perfetto.dev (or
  chrome://tracing) and load it. Each device is a process, each hardware queue a track, plus a
  host track of enqueues; arrows are signals between queues; counters show signal sets in use,
  argument-arena bytes and device memory;
* ``graph_replay.plan.dot`` — the executable's plan (segments, strands, cross-strand waits):
  ``dot -Tsvg graph_replay.plan.dot -o plan.svg``;
* ``graph_replay.graph.dot`` — the graph itself, in HIP's ``hipGraphDebugDotPrint`` shape.

Pass a directory to write them elsewhere: ``python examples/traced_replay.py /tmp``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

import ahipgraph as ahg

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("graph_replay", HERE / "graph_replay.py")
assert _spec is not None
assert _spec.loader is not None
replay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay)


async def main(out: Path) -> None:
    device = ahg.get_device(0)
    stream = device.create_stream()
    buffers = {name: device.malloc(replay.N * 4) for name in ("x", "y1", "y2", "out")}
    host_in = np.random.default_rng(7).standard_normal(replay.N, dtype=np.float32)
    host_out = np.zeros(replay.N, dtype=np.float32)
    graph = replay.build(host_in, host_out, buffers, lambda: None)
    graph_exec = graph.instantiate()

    with ahg.tracing() as trace:
        for _ in range(3):
            await graph_exec.launch(stream)
        await stream.synchronize()
        graph_exec.destroy()
        graph.destroy()
        for ptr in buffers.values():
            device.free(ptr)
        stream.destroy()
    np.testing.assert_allclose(host_out, 2.0 * host_in + (host_in + 1.0) ** 2, rtol=1e-5)

    trace.save(out / "graph_replay.trace.json")
    print(
        f"traced {len(trace.ops)} ops, {len(trace.flows)} signal flows and "
        f"{len(trace.enqueues)} enqueues -> {out / 'graph_replay.trace.json'}"
    )


def write_dots(out: Path) -> None:
    device = ahg.get_device(0)
    buffers = {name: device.malloc(replay.N * 4) for name in ("x", "y1", "y2", "out")}
    host = np.zeros(replay.N, dtype=np.float32)
    graph = replay.build(host, host, buffers, lambda: None)
    graph_exec = graph.instantiate()
    (out / "graph_replay.plan.dot").write_text(graph_exec.plan_dot())
    (out / "graph_replay.graph.dot").write_text(graph.to_dot())
    print(f"plan and graph DOT -> {out}")
    graph_exec.destroy()
    graph.destroy()
    for ptr in buffers.values():
        device.free(ptr)


USAGE = "usage: python examples/traced_replay.py [DIR]"

if __name__ == "__main__":
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(USAGE)
        raise SystemExit(0)
    if len(sys.argv) > 2:  # a second directory would be silently ignored
        raise SystemExit(f"{USAGE}\ntraced_replay.py: one directory at most, got {sys.argv[1:]}")
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    if not target.is_dir():  # say so now, not after the replays when the files are written
        raise SystemExit(f"traced_replay.py: {str(target)!r} is not a directory")
    ahg.run(main(target))
    write_dots(target)
