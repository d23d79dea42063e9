"""ahipgraph: AMD HIP Graphs as an asyncio runtime over a simulated, asynchronous GPU.

Build a graph of device work once, instantiate it once, replay it with almost no host cost::

    import ahipgraph as ahg

    exec = graph.instantiate()
    await (await exec.launch(stream))

Everything public is importable from here; the implementation lives in private layers
(core, device, runtime, graph, exec, lifetime).
"""

import contextlib as _contextlib

from ._annotations import evaluate_class_annotations as _evaluate_class_annotations
from ._annotations import resolve_deferred_annotations as _resolve_deferred_annotations
from ._run import run
from ._version import __version__ as __version__
from .core.errors import (
    CapturedEvent,
    ContextIsDestroyed,
    Destroyed,
    ErrorCode,
    GraphExecUpdateFailure,
    HipError,
    IllegalAddress,
    IllegalState,
    InvalidConfiguration,
    InvalidDevice,
    InvalidDeviceFunction,
    InvalidDevicePointer,
    InvalidHandle,
    InvalidMemcpyDirection,
    InvalidPitchValue,
    InvalidSymbol,
    InvalidValue,
    LaunchFailure,
    NotFound,
    NotInitialized,
    NotReady,
    NotSupported,
    OperatingSystem,
    OutOfMemory,
    PeerAccessAlreadyEnabled,
    PeerAccessNotEnabled,
    StreamCaptureImplicit,
    StreamCaptureInvalidated,
    StreamCaptureIsolation,
    StreamCaptureMerge,
    StreamCaptureUnjoined,
    StreamCaptureUnmatched,
    StreamCaptureUnsupported,
    StreamCaptureWrongThread,
    Unknown,
)
from .core.lifecycle import ForgottenHandleWarning, HandleState, collect_forgotten
from .core.registry import HandleId, RegistryStatistics
from .core.waitqueue import WaitQueueStatistics
from .device.conditional_arg import CondHandle, set_conditional
from .device.graph_pool import GraphMemAttribute, GraphPoolStatistics
from .device.host_function import HostFunction, host_function
from .device.hwqueue import QueueStatistics
from .device.kernel import Dim3, Kernel, Threads, kernel
from .device.kernel_args import (
    AtomicPtr,
    ConstPtr,
    Ptr,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .device.memory import MemoryInfo, MemoryStatistics
from .device.pointer import NULL, DevicePtr
from .device.properties import CopyKind, CostModel, DeviceProperties
from .device.symbols import DeviceSymbol, device_symbol
from .device.thread_ids import ThreadIdsStatistics
from .exec.arena import ArenaStatistics
from .exec.exec_state import ExecState
from .exec.flags import InstantiateFlags, UpdateResult, UpdateResultKind
from .exec.graph_exec import ExecStatistics, GraphExec
from .exec.instantiate_options import InstantiateOptions
from .exec.race_reports import RaceError, RaceReport, RaceSite, RaceWarning
from .exec.signal_pool import SignalPoolStatistics
from .graph.conditional import ConditionalHandle, ConditionalKind, ConditionalNodeParams
from .graph.dot import DotFlags
from .graph.generic import GraphNodeParams
from .graph.graph import Graph, GraphStatistics
from .graph.node import GraphNode
from .graph.node_type import NodeType
from .graph.params import ChildGraphParams, EventParams, MemAllocParams, MemFreeParams
from .lifetime.user_object import UserObject, UserObjectStatistics
from .runtime.capture import (
    CaptureDependencies,
    CaptureInfo,
    CaptureMode,
    CaptureStatistics,
    CaptureStatus,
    exchange_capture_mode,
)
from .runtime.capture import statistics as capture_statistics
from .runtime.capture_scope import CaptureScope
from .runtime.completion import Completion
from .runtime.current import current_device, set_device
from .runtime.device import Device, DeviceStatistics, configure_devices, device_count, get_device
from .runtime.event import Event, EventState, elapsed_time
from .runtime.launch_attributes import (
    AccessPolicyWindow,
    AccessProperty,
    KernelAttributes,
    KernelNodeAttribute,
    stream_priority_range,
)
from .runtime.params import HostParams, KernelParams, MemcpyParams, MemsetParams
from .runtime.per_thread import STREAM_PER_THREAD, PerThreadStream
from .runtime.pitched import PitchedCopyParams, PitchedPtr
from .runtime.stream import Stream, StreamState, StreamStatistics
from .runtime.stream_memops import StreamWaitFlag
from .tools.race import RaceCheck, RaceCheckStatistics, race_check
from .tools.race import install_from_environment as _install_race_check
from .tools.trace import Trace, tracing

__all__ = [
    "ForgottenHandleWarning",
    "HandleState",
    "HandleId",
    "ExecState",
    "StreamState",
    "EventState",
    "collect_forgotten",
    "race_check",
    "host_function",
    "HostFunction",
    "RaceWarning",
    "RaceSite",
    "RaceReport",
    "RaceError",
    "RaceCheck",
    "ConstPtr",
    "AtomicPtr",
    "NULL",
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
    "CaptureDependencies",
    "CaptureInfo",
    "CaptureMode",
    "CaptureScope",
    "CaptureStatus",
    "CapturedEvent",
    "Completion",
    "ContextIsDestroyed",
    "Destroyed",
    "CopyKind",
    "CostModel",
    "Device",
    "DeviceProperties",
    "DevicePtr",
    "Dim3",
    "DotFlags",
    "ErrorCode",
    "Event",
    "Graph",
    "ExecStatistics",
    "GraphExec",
    "GraphExecUpdateFailure",
    "InstantiateFlags",
    "InstantiateOptions",
    "UpdateResult",
    "UpdateResultKind",
    "GraphNode",
    "HipError",
    "IllegalAddress",
    "IllegalState",
    "InvalidConfiguration",
    "InvalidDevice",
    "InvalidDeviceFunction",
    "InvalidDevicePointer",
    "InvalidHandle",
    "InvalidMemcpyDirection",
    "InvalidSymbol",
    "InvalidValue",
    "Kernel",
    "LaunchFailure",
    "NodeType",
    "NotFound",
    "NotInitialized",
    "NotReady",
    "NotSupported",
    "OperatingSystem",
    "OutOfMemory",
    "Ptr",
    "Stream",
    "StreamCaptureImplicit",
    "StreamCaptureInvalidated",
    "StreamCaptureIsolation",
    "StreamCaptureMerge",
    "StreamCaptureUnjoined",
    "StreamCaptureUnmatched",
    "StreamCaptureUnsupported",
    "StreamCaptureWrongThread",
    "Threads",
    "Trace",
    "Unknown",
    "UserObject",
    "capture_statistics",
    "configure_devices",
    "device_count",
    "elapsed_time",
    "exchange_capture_mode",
    "float32",
    "float64",
    "get_device",
    "int16",
    "int32",
    "int64",
    "int8",
    "kernel",
    "run",
    "tracing",
    "uint16",
    "uint32",
    "uint64",
    "uint8",
    "InvalidPitchValue",
    "PeerAccessAlreadyEnabled",
    "PeerAccessNotEnabled",
    "DeviceSymbol",
    "MemoryInfo",
    "PitchedPtr",
    "STREAM_PER_THREAD",
    "PerThreadStream",
    "StreamWaitFlag",
    "current_device",
    "device_symbol",
    "set_device",
    # parameter records
    "ChildGraphParams",
    "EventParams",
    "HostParams",
    "KernelParams",
    "MemAllocParams",
    "MemFreeParams",
    "MemcpyParams",
    "MemsetParams",
    "PitchedCopyParams",
    # what statistics() returns
    "ArenaStatistics",
    "CaptureStatistics",
    "DeviceStatistics",
    "GraphPoolStatistics",
    "GraphStatistics",
    "MemoryStatistics",
    "QueueStatistics",
    "RaceCheckStatistics",
    "RegistryStatistics",
    "SignalPoolStatistics",
    "StreamStatistics",
    "ThreadIdsStatistics",
    "UserObjectStatistics",
    "WaitQueueStatistics",
]

_install_race_check()  # AHIPGRAPH_RACE_CHECK=1 checks a whole run for races


def _present_public_names_as_ahipgraph() -> None:
    """Give every exported class and function ``__module__ == "ahipgraph"``.

    Users import these from ``ahipgraph``; tracebacks, reprs, ``help()`` and pickles should
    name that, not the internal module a name happens to live in.
    """
    for name in __all__:
        obj = globals()[name]
        module = getattr(obj, "__module__", None)
        if isinstance(module, str) and module.startswith("ahipgraph."):
            if isinstance(obj, type):
                _evaluate_class_annotations(obj)  # while its own module still resolves them
            with _contextlib.suppress(AttributeError, TypeError):  # e.g. a typing alias
                obj.__module__ = __name__


_resolve_deferred_annotations(__name__)
_present_public_names_as_ahipgraph()
