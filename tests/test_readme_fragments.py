"""The README's shorter snippets run, each in the setting the text around it describes.

The README's first example is a whole program (``tests/test_examples.py`` runs it); the
snippets after it use names the prose supplies (``graph``, ``graph_exec``, ``stream``...). Each
is run here as written, as the body of a coroutine whose parameters are those names, so a
renamed call, a changed signature or a snippet that no longer does what the text says fails.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing

ROOT = Path(__file__).resolve().parent.parent


def _snippet(marker: str) -> str:
    """The README's one ```python block that contains ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"{len(found)} README snippets contain {marker!r}"
    return str(found[0])


def _as_coroutine(source: str, names: list[str]) -> Callable[..., Awaitable[dict[str, Any]]]:
    """``source`` as the body of ``async def snippet(*names)``, returning its locals."""
    code = (
        f"async def snippet({', '.join(names)}):\n"
        f"{textwrap.indent(source, '    ')}\n"
        "    return locals()\n"
    )
    namespace: dict[str, Any] = {"ahg": ahg, "np": np, "Path": Path}
    exec(compile(code, "README.md", "exec"), namespace)
    function: Callable[..., Awaitable[dict[str, Any]]] = namespace["snippet"]
    return function


@ahg.kernel
def _scale(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.float32]) -> None:
    x[t.ids[t.ids < n]] *= 2


@pytest.mark.asyncio
async def test_the_tracing_and_dot_snippets_write_what_the_text_says(
    device: ahg.Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    x = device.malloc(4 * 64)
    with ahg.Graph() as graph, device.create_stream() as stream:
        graph.add_kernel_node(_scale, 1, 64, (64, x))
        with graph.instantiate() as graph_exec:
            tracing = _as_coroutine(_snippet("ahg.tracing()"), ["graph_exec", "stream"])
            await tracing(graph_exec, stream)
            dot = _as_coroutine(_snippet("debug_dot_print"), ["graph", "graph_exec"])
            await dot(graph, graph_exec)

    events = json.loads((tmp_path / "replay.trace.json").read_text())["traceEvents"]
    assert any(e.get("cat") == "kernel" and "_scale" in e.get("name", "") for e in events)
    assert (tmp_path / "graph.dot").read_text().startswith("digraph")
    assert (tmp_path / "plan.dot").read_text().startswith('digraph "plan"')
    device.free(x)


@pytest.mark.asyncio
async def test_the_conditional_snippet_loops_on_the_device_until_its_kernel_says_stop(
    device: ahg.Device,
) -> None:
    x = device.malloc(8 * 4)
    device.view(x, np.float64)[:] = [100.0, 3.0, 0.5, 40.0]
    with ahg.Graph() as graph, device.create_stream() as stream:
        made = await _as_coroutine(_snippet("add_conditional_node"), ["graph", "x"])(graph, x)
        assert made["node"].type == ahg.NodeType.Conditional
        with graph.instantiate() as graph_exec:
            await (await graph_exec.launch(stream))  # one launch, the whole loop
    # halved until the largest value fell below 1: 100 needs 7 halvings
    assert device.view(x, np.float64).tolist() == [100 / 128, 3 / 128, 0.5 / 128, 40 / 128]
    device.free(x)


@pytest.mark.asyncio
async def test_the_devices_snippet_runs_on_two_devices() -> None:
    first, rest = _snippet("configure_devices").split("\n", 1)
    assert first == "ahg.configure_devices(2)"
    with testing.fresh_devices(1):
        exec(first, {"ahg": ahg})  # as the snippet does, before anything below exists
        assert ahg.device_count() == 2
        zero, one = ahg.get_device(0), ahg.get_device(1)
        rows = 4
        dev, flag = one.malloc(256 * rows), one.malloc(4)
        one.view(flag, np.uint32)[0] = 1  # what the snippet's wait waits for
        host = np.arange(100 * rows, dtype=np.uint8)
        host_coeffs = np.linspace(0, 1, 16, dtype=np.float32)
        with (
            ahg.Graph() as graph,
            one.create_stream() as stream,
            zero.create_stream() as other_device_stream,
        ):
            zeroed = graph.add_memset_node(dev, 0, 256 * rows)
            with graph.instantiate() as graph_exec:
                names = ["stream", "host_coeffs", "dev", "host", "rows", "graph", "graph_exec"]
                snippet = _as_coroutine(rest, [*names, "other_device_stream", "flag"])
                made = await snippet(
                    stream, host_coeffs, dev, host, rows, graph, graph_exec,
                    other_device_stream, flag,
                )  # fmt: skip
                await one.synchronize()
                await zero.synchronize()
                assert ahg.current_device() == one  # the snippet's set_device(1), this task's
            coeffs = made["coeffs"]
            out = np.empty(16, np.float32)
            await stream.memcpy_from_symbol(out, coeffs)
            await stream.synchronize()
            assert out.tolist() == host_coeffs.tolist()
            assert made["node"].dependencies() == []
            assert made["row"].dtype == np.uint8  # ahg.uint8, as a kernel names it
            assert made["row"].shape == (100,)
            assert zeroed.type == ahg.NodeType.Memset
        assert zero.can_access_peer(1)
        one.free(dev)
        one.free(flag)


def test_the_testing_snippet_is_a_test_the_kit_can_run() -> None:
    namespace: dict[str, Any] = {"pytest": pytest}
    exec(compile(_snippet("fail_kernels"), "README.md", "exec"), namespace)
    test = namespace["test_launch_survives_a_kernel_fault"]
    assert test.pytestmark[0].name == "asyncio"
    with testing.fresh_devices(1) as (device,):
        ahg.run(test(device))


# Each README python block and the test that runs it, found by a line only that block has.
RUN_BY = {
    "async def main() -> None:": "tests/test_examples.py::test_readme_example_runs",
    "ahg.tracing()": "test_the_tracing_and_dot_snippets_write_what_the_text_says",
    "debug_dot_print": "test_the_tracing_and_dot_snippets_write_what_the_text_says",
    "add_conditional_node": "test_the_conditional_snippet_loops_on_the_device_until_...",
    "configure_devices": "test_the_devices_snippet_runs_on_two_devices",
    "fail_kernels": "test_the_testing_snippet_is_a_test_the_kit_can_run",
    "ahg.race_check(": "tests/test_race_report.py (its APP ends with this block)",
}


def test_every_readme_python_block_is_run_by_a_test() -> None:
    """A block added to the README without a test that runs it fails here, by its first line.

    The race-check block needs its ``main`` from the text around it, so
    ``tests/test_race_report.py`` runs it as the end of a whole script: that script must end
    with the block exactly as the README shows it.
    """
    from test_race_report import APP

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    unclaimed = [
        block.splitlines()[0] for block in blocks if not any(marker in block for marker in RUN_BY)
    ]
    assert unclaimed == [], "README python blocks that no test runs (add one to RUN_BY)"
    assert all(any(marker in block for block in blocks) for marker in RUN_BY)
    (race,) = [block for block in blocks if "ahg.race_check(" in block]
    assert APP.endswith(race)
