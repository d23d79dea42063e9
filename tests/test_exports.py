"""The public surface: what `import ahipgraph as ahg` offers, and what it refuses."""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg


def test_every_name_in_all_exists() -> None:
    missing = [name for name in ahg.__all__ if not hasattr(ahg, name)]
    assert missing == []


def test_all_has_no_duplicates() -> None:
    assert len(ahg.__all__) == len(set(ahg.__all__))


def test_foundation_names_are_exported() -> None:
    expected = {
        "Completion",
        "CopyKind",
        "CostModel",
        "Device",
        "DeviceProperties",
        "DevicePtr",
        "Dim3",
        "ErrorCode",
        "Event",
        "HipError",
        "Kernel",
        "NULL",
        "Ptr",
        "Stream",
        "Threads",
        "configure_devices",
        "device_count",
        "elapsed_time",
        "get_device",
        "kernel",
        "run",
        "tracing",
        "Trace",
        *("int8", "int16", "int32", "int64"),
        *("uint8", "uint16", "uint32", "uint64"),
        "float32",
        "float64",
    }
    assert expected <= set(ahg.__all__)


def test_lifecycle_names_are_exported() -> None:
    assert {"Destroyed", "ForgottenHandleWarning", "collect_forgotten"} <= set(ahg.__all__)
    assert issubclass(ahg.ForgottenHandleWarning, ResourceWarning)


def test_capture_names_are_exported() -> None:
    expected = {
        "CaptureDependencies",
        "CaptureInfo",
        "CaptureMode",
        "CaptureStatus",
        "exchange_capture_mode",
    }
    assert expected <= set(ahg.__all__)


def test_stream_and_device_surface_names_are_exported() -> None:
    expected = {
        "DeviceSymbol",
        "InvalidPitchValue",
        "PeerAccessAlreadyEnabled",
        "PeerAccessNotEnabled",
        "PitchedPtr",
        "STREAM_PER_THREAD",
        "StreamWaitFlag",
        "current_device",
        "device_symbol",
        "set_device",
    }
    assert expected <= set(ahg.__all__)


def test_private_layers_are_not_exported() -> None:
    assert not {"core", "device", "runtime"} & set(ahg.__all__)
    assert all(not name.startswith("_") for name in ahg.__all__)


def test_stream_has_no_public_constructor(device: ahg.Device) -> None:
    with pytest.raises(TypeError, match="create_stream"):
        ahg.Stream(device)


def test_event_has_no_public_constructor(device: ahg.Device) -> None:
    with pytest.raises(TypeError, match="create_event"):
        ahg.Event(device)


def test_devices_graph_execs_and_nodes_have_no_public_constructor(device: ahg.Device) -> None:
    with pytest.raises(TypeError, match="get_device"):
        ahg.Device(0, ahg.DeviceProperties())
    graph = ahg.Graph()
    with pytest.raises(TypeError, match="instantiate"):
        ahg.GraphExec(graph, 0, device, {}, object())
    with pytest.raises(TypeError, match="add_"):
        ahg.GraphNode(graph, ahg.NodeType.Empty, None)
    graph.destroy()


def test_factories_make_streams_and_events(device: ahg.Device) -> None:
    stream = device.create_stream()
    event = device.create_event()
    assert isinstance(stream, ahg.Stream)
    assert isinstance(event, ahg.Event)
    stream.destroy()
    event.destroy()


async def _answer() -> int:
    return 42


async def _loop_kind() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_run_on_asyncio() -> None:
    assert ahg.run(_answer) == 42
    assert ahg.run(_answer()) == 42
    assert ahg.run(_loop_kind) == "asyncio"


def test_run_on_uvloop() -> None:
    pytest.importorskip("uvloop")
    assert ahg.run(_answer, use_uvloop=True) == 42
    assert ahg.run(_loop_kind, use_uvloop=True) == "uvloop"


def test_race_checker_names_are_exported() -> None:
    expected = {
        "AtomicPtr",
        "ConstPtr",
        "HostFunction",
        "RaceCheck",
        "RaceError",
        "RaceReport",
        "RaceSite",
        "RaceWarning",
        "host_function",
        "race_check",
    }
    assert expected <= set(ahg.__all__)
    assert issubclass(ahg.RaceWarning, UserWarning)
    assert not issubclass(ahg.RaceError, ahg.HipError)  # a finding, not a HIP status


def test_hip_graph_surface_names_are_exported() -> None:
    expected = {
        "AccessPolicyWindow",
        "AccessProperty",
        "CondHandle",
        "ConditionalHandle",
        "ConditionalKind",
        "ConditionalNodeParams",
        "GraphMemAttribute",
        "GraphNodeParams",
        "KernelAttributes",
        "KernelNodeAttribute",
        "set_conditional",
        "stream_priority_range",
    }
    assert expected <= set(ahg.__all__)


def _package_classes() -> dict[str, type]:
    """Every public class defined in an ahipgraph module, by name."""
    import importlib
    import pkgutil

    classes: dict[str, type] = {}
    for info in pkgutil.walk_packages(ahg.__path__, "ahipgraph."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if isinstance(obj, type) and not name.startswith("_"):
                classes.setdefault(name, obj)
    return classes


def test_every_parameter_record_and_statistics_type_is_exported() -> None:
    wanted = {
        name
        for name in _package_classes()
        if name.endswith(("Statistics", "Params")) and not name.startswith("Stress")
    }
    assert {"KernelParams", "ExecStatistics", "QueueStatistics"} <= wanted
    missing = wanted - set(ahg.__all__)
    assert not missing
    for name in wanted:
        assert getattr(ahg, name).__module__ == "ahipgraph", name


def test_what_statistics_returns_is_exported(device: ahg.Device) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    for handle in (device, graph, graph_exec, stream, device.memory):
        stats = handle.statistics()
        assert getattr(ahg, type(stats).__name__) is type(stats)
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
