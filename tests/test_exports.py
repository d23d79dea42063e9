"""The public surface: what `import ahipgraph as ahg` offers, and what it refuses."""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg


def test_every_name_in_all_exists() -> None:
    missing = [name for name in ahg.__all__ if not hasattr(ahg, name)]
    assert missing == []


def test_no_helper_of_the_package_reads_as_a_public_name() -> None:
    """``dir(ahg)`` (what completion and ``help()`` show) holds the exported names and the
    private layers' packages, not the modules and helpers the package itself imports
    (``contextlib``, the ``annotations`` future flag, the annotation resolvers were)."""
    import types

    unexported = [
        name
        for name in dir(ahg)
        if not name.startswith("_")
        and name not in ahg.__all__
        and not isinstance(getattr(ahg, name), types.ModuleType)
    ]
    assert unexported == []
    assert "contextlib" not in dir(ahg)


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
        "capture_statistics",
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


# The public attributes of the handle classes, name by name. A new public name must be added
# here on purpose: runtime plumbing (loop binding, submission, liveness checks, ownership
# bookkeeping) stays underscored or lives on internal objects, as trio and anyio keep theirs.
PUBLIC_ATTRIBUTES = {
    "Device": (
        "can_access_peer clock create_event create_stream disable_peer_access enable_peer_access "
        "engine free graph_mem_attribute graph_mem_trim in_flight loop malloc memcpy memcpy_2d "
        "memcpy_3d memcpy_from_symbol memcpy_peer memcpy_to_symbol memory memory_info memset name "
        "null_stream ordinal per_thread_stream properties queues set_graph_mem_attribute "
        "statistics streams synchronize view"
    ),
    "Stream": (
        "alive begin_capture begin_capture_to_graph capture capture_info destroy device "
        "end_capture free_async free_async_nowait hid implicit is_capturing is_null "
        "launch_host_func launch_host_func_nowait launch_kernel launch_kernel_nowait malloc_async "
        "malloc_async_nowait memcpy memcpy_2d memcpy_2d_nowait memcpy_3d memcpy_3d_nowait "
        "memcpy_from_symbol memcpy_from_symbol_nowait memcpy_nowait memcpy_peer "
        "memcpy_peer_nowait memcpy_to_symbol memcpy_to_symbol_nowait memset memset_nowait "
        "non_blocking priority query queue record_event record_event_nowait state statistics "
        "submitted synchronize tail update_capture_dependencies wait_event wait_event_nowait "
        "wait_value_32 wait_value_32_nowait wait_value_64 wait_value_64_nowait write_value_32 "
        "write_value_32_nowait write_value_64 write_value_64_nowait"
    ),
    "Event": (
        "alive blocking_sync destroy device disable_timing elapsed_time hid query record "
        "record_nowait signal state synchronize time_ns"
    ),
    "Graph": (
        "add_child_graph_node add_conditional_node add_dependencies add_empty_node "
        "add_event_record_node add_event_wait_node add_host_node add_kernel_node "
        "add_mem_alloc_node add_mem_free_node add_memcpy_3d_node add_memcpy_node "
        "add_memcpy_node_from_symbol add_memcpy_node_to_symbol add_memset_node add_node alive "
        "check_races clone conditional_handle debug_dot_print destroy destroyed edges "
        "find_in_clone has_mem_nodes hid id instantiate instantiated lock nodes original "
        "owner_node "
        "release_user_object remove_dependencies render retain_user_object root_nodes state "
        "statistics to_dot user_objects"
    ),
    "GraphExec": (
        "alive arena destroy device flags hid in_flight kernel_node_attribute launch "
        "launch_nowait node_enabled plan plan_dot pool set_child_graph_node_params "
        "set_event_record_node_event set_event_wait_node_event set_host_node_params "
        "set_kernel_node_attribute set_kernel_node_params set_memcpy_3d_node_params "
        "set_memcpy_node_from_symbol set_memcpy_node_params set_memcpy_node_to_symbol "
        "set_memset_node_params set_node_enabled set_node_params state statistics update upload "
        "upload_nowait user_objects"
    ),
    "GraphNode": (
        "alive copy_attributes_from dependencies dependents destroy get_attribute "
        "get_child_graph get_event get_host_params get_kernel_params get_mem_alloc_params "
        "get_mem_free_params get_memcpy_params get_memset_params graph hid id "
        "params set_attribute set_child_graph set_event set_host_params set_kernel_params "
        "set_memcpy_3d_params set_memcpy_from_symbol_params set_memcpy_params "
        "set_memcpy_to_symbol_params set_memset_params set_params state type"
    ),
    "UserObject": "alive data destroy hid owners refcount release retain state statistics",
    "Completion": "done end_ns exception start_ns wait",
}


@pytest.mark.parametrize("name", sorted(PUBLIC_ATTRIBUTES))
def test_each_handle_class_has_exactly_its_deliberate_public_attributes(name: str) -> None:
    public = {attr for attr in dir(getattr(ahg, name)) if not attr.startswith("_")}
    assert sorted(public) == sorted(PUBLIC_ATTRIBUTES[name].split())


@pytest.mark.parametrize(
    ("name", "hooks"),
    [
        ("Device", "bind_loop run_ready schedule next_queue wait_signal"),
        ("Stream", "submit take_error check_open implicit_waits report_error"),
        ("Event", "recorded check_open"),
        ("Graph", "mark_instantiated check_alive"),
        ("GraphExec", "retain release refcount check_alive"),
        ("GraphNode", "check_alive"),
        ("UserObject", "adopt disown owned_by"),
    ],
)
def test_runtime_plumbing_is_not_public(name: str, hooks: str) -> None:
    cls = getattr(ahg, name)
    assert [hook for hook in hooks.split() if hasattr(cls, hook)] == []
