"""``instantiate(UPLOAD, upload_stream=s)`` when ``s`` is destroyed while the graph is built.

The stream is checked before the build and used for the upload after it; another thread may
destroy it in between. The upload then failed with the executable already made and never
returned: nothing could destroy it, and it held its arena, signal sets and streams until the
collector found it (with a forgotten-handle warning). Now the failed call gives all of it back.
"""

from __future__ import annotations

from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.exec import graph_exec as graph_exec_module
from ahipgraph.testing.leaks import leak_report
from ahipgraph.testing.leaks import snapshot as leak_snapshot


@ahg.kernel
def tick(t: ahg.Threads) -> None:
    pass


def test_a_stream_destroyed_during_the_build_fails_the_call_and_leaks_nothing(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = ahg.Graph()
    graph.add_kernel_node(tick, 1, 1)
    stream = device.create_stream()
    build = graph_exec_module.instantiate

    def build_then_destroy_the_stream(*args: Any) -> Any:
        built = build(*args)
        stream.destroy()  # what another thread may do while the graph is built
        return built

    monkeypatch.setattr(graph_exec_module, "instantiate", build_then_destroy_the_stream)
    before = leak_snapshot()
    with pytest.raises(ahg.ContextIsDestroyed):
        graph.instantiate(ahg.InstantiateFlags.UPLOAD, upload_stream=stream)
    assert leak_report(before) is None
    monkeypatch.undo()
    graph.destroy()
