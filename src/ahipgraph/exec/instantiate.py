"""Instantiation: one function from a graph to everything an executable runs with.

:func:`check_request` checks ``graph.instantiate``'s arguments before anything is built.
:func:`instantiate` then does all the expensive work, once: copy the graph (under its lock),
check kernel nodes against the device, optionally check races, plan segments and strands, size
the argument arena, compile one op list per strand with the arguments packed into the arena, make
the signal-set pool and the internal streams, and mark the graph instantiated. It returns an
:class:`Instantiated` record; the :class:`~ahipgraph.GraphExec` constructor takes that record
and nothing else, and splits it between its launcher and its updater.

A failure anywhere frees what was made so far: the graph, the device and its memory are as
they were (check, then commit).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, is_
from typing import TYPE_CHECKING, Any

from ..core.errors import HipError, InvalidDevicePointer, NotSupported
from ..core.ints import as_int
from ..device.pointer import DevicePtr, replacements
from ..device.table import live
from ..graph.node_type import NodeType
from ..runtime.device import Device, get_device
from ..runtime.per_thread import PerThreadStream
from ..runtime.stream import Stream, launch_stream
from .arena import HEADROOM_BYTES, KernelArgArena
from .compile import Compiled, compile_plan
from .conditional import Conditionals, check_foreign_handles, prepare_plain
from .conditional import prepare as prepare_conditionals
from .flags import InstantiateFlags, check_instantiate_flags
from .planner import Plan, plan_graph
from .race_reports import RaceError
from .races import ExecRaces, check_exec_graph
from .signal_pool import SignalSetPool
from .snapshot import ExecGraph, ExecNode, snapshot_sources

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from ..lifetime.user_object import UserObject

__all__ = [
    "MAX_PARALLEL_STREAMS",
    "InstantiateRequest",
    "Instantiated",
    "check_flag_work",
    "check_request",
    "instantiate",
]

_grid = attrgetter("grid")
_block = attrgetter("block")
_shared_mem = attrgetter("shared_mem")
_kernel_of = attrgetter("kernel")
_threads_of = attrgetter("threads")

MAX_PARALLEL_STREAMS = 4  # HIP's DEBUG_HIP_FORCE_GRAPH_QUEUES default
_MAX_SIGNAL_SETS = 1 << 16  # prepopulated sets; the pool still grows past them when needed
_OPTIONS: dict[str, tuple[type, ...]] = {
    "signal_sets": (int,),
    "num_sets": (int,),  # the signal-set pool's own name for ``signal_sets``
    "signal_set_policy": (str,),
    "wait_for_signal_sets": (bool,),
    "arena_headroom": (int,),
    "strict_flush": (bool,),
    # ``STREAM_PER_THREAD`` too: HIP's upload resolves ``hipStreamPerThread``, as
    # ``exec.upload`` does.
    "upload_stream": (Stream, PerThreadStream, type(None)),
    "check_races": (bool,),
}


@dataclass(frozen=True, slots=True)
class InstantiateRequest:
    """``graph.instantiate``'s arguments, checked."""

    flags: InstantiateFlags
    device: Device
    options: dict[str, Any]
    upload: bool
    upload_stream: Stream | PerThreadStream | None


@dataclass(slots=True, eq=False)
class Instantiated:
    """Everything :func:`instantiate` made: what a :class:`~ahipgraph.GraphExec` runs with."""

    flags: InstantiateFlags
    device: Device
    graph: ExecGraph
    sources: Mapping[Any, ExecNode]  # original node handle -> its copy
    plan: Plan
    compiled: Compiled
    arena: KernelArgArena
    pool: SignalSetPool
    internal_streams: list[Stream]  # strands 1.. of every launch
    conditionals: Conditionals | None
    races: ExecRaces | None
    user_objects: list[UserObject]  # each once, with one reference the executable takes over
    holder: object  # owns those references until the executable adopts its own


def check_request(flags: int, device: Device | None, options: dict[str, Any]) -> InstantiateRequest:
    """Check every argument of ``graph.instantiate`` before anything is built.

    What ``DEVICE_LAUNCH`` and ``UPLOAD``'s stream ask for is checked by
    :func:`check_flag_work`, once the graph's own checks have passed.

    Raises:
        TypeError / ValueError: an unknown option, or an option of the wrong type.
        InvalidDevice: ``device`` was replaced by ``configure_devices``.
    """
    checked = check_instantiate_flags(flags)
    if options:  # none given (the usual call): nothing to check
        _check_options(options)
        _merge_num_sets(options)
        signal_set_policy(options)  # a bad policy fails before anything is built
    if device is None:
        device = get_device()  # the calling task's current device
    elif not isinstance(device, Device):
        raise TypeError(f"device must be a Device (ahg.get_device(n)), got {device!r}")
    else:
        live(device)  # InvalidDevice: replaced by configure_devices
    upload_stream = options.get("upload_stream")
    if upload_stream is not None and checked is not InstantiateFlags.UPLOAD:
        raise ValueError("upload_stream is only used with InstantiateFlags.UPLOAD")
    upload = checked is InstantiateFlags.UPLOAD
    return InstantiateRequest(checked, device, options, upload, upload_stream)


def check_flag_work(graph: Graph, request: InstantiateRequest) -> None:
    """Refuse what the flags ask for that cannot be done, before anything is built.

    HIP's ``hipGraphInstantiateWithParams`` instantiates first and uploads after, and its
    instantiate checks the graph (null, memory nodes instantiated again, a cycle) before
    anything a flag selects: so a graph's own error is the one reported, and only a graph
    that passes those checks gets the upload stream's error or, here, ``DEVICE_LAUNCH``'s
    ``NotSupported``. The graph's checks run only on those failure paths.

    Raises:
        InvalidValue: the graph was destroyed or has a cycle (in it or in a child graph).
        NotSupported: a graph with memory nodes instantiated a second time; otherwise
            ``DEVICE_LAUNCH`` (the simulator has no device-side launch).
        ContextIsDestroyed / InvalidValue / InvalidDevice: ``UPLOAD``'s stream, as
            :meth:`GraphExec.upload` checks it.
    """
    if request.flags is InstantiateFlags.DEVICE_LAUNCH:
        _check_graph(graph)
        raise NotSupported("device-side graph launch is not simulated")
    if request.upload:
        try:
            launch_stream(request.upload_stream, request.device)
        except HipError:
            _check_graph(graph)
            raise


def _check_graph(graph: Graph) -> None:
    """What :func:`instantiate` checks of the graph before it builds anything."""
    with graph.lock:
        check_instantiable(graph)
        snapshot_sources(graph)  # InvalidValue on a cycle; the copy is only garbage


def _memory_node_params(exec_graph: ExecGraph) -> list[Any]:
    """The parameters of ``exec_graph``'s memory-alloc and memory-free nodes (child graphs and
    conditional bodies hold none)."""
    kinds = (NodeType.MemAlloc, NodeType.MemFree)
    if not any(map(exec_graph.has_type, kinds)):
        return []
    if exec_graph.flat:
        pairs = zip(exec_graph.types(), exec_graph.params_column(), strict=True)
        return [params for kind, params in pairs if kind in kinds]
    return [node.params for node in exec_graph.walk() if node.type in kinds]


def check_pointer_origins(kernel_params: list[Any], memory_params: Sequence[Any] = ()) -> None:
    """Refuse kernel nodes holding a pointer of a device ``configure_devices`` replaced since
    they were added, with the error a launch of such a pointer gets, and memory nodes whose
    range that device reserved: the new device's memory holds its own ranges at the same
    addresses, which an executable would take for them (commit, free, give back).

    A node's arguments are checked as it is added; a graph made before the devices were
    replaced may still hold the old devices' pointers, whose addresses the new devices reuse
    (see device/pointer.py): its launches would write the new devices' memory. ``instantiate``
    calls this only when a device was replaced since the graph was made, or for graphs with
    child graphs or conditional bodies (whose nodes may be older than the graph): a look at
    every argument of every kernel node.

    Raises:
        InvalidDevicePointer: a kernel argument is a replaced device's pointer, or a memory
            node's range is a replaced device's.
    """
    pointer = DevicePtr
    for params in kernel_params:
        for value in params.args:
            if type(value) is pointer and value._origin.replaced:
                params.kernel.pack(params.args)  # raises what a launch of these raises
                raise InvalidDevicePointer(  # pragma: no cover - pack refuses it first
                    f"{value!r} is a pointer of a device configure_devices replaced"
                )
    for params in memory_params:
        ptr = params.ptr
        if ptr._origin.replaced:
            raise InvalidDevicePointer(
                f"a memory node's range {ptr!r} was reserved by a device configure_devices replaced"
            )


def instantiate(graph: Graph, request: InstantiateRequest) -> Instantiated:
    """Build everything an executable of ``graph`` runs with (see the module notes).

    Raises:
        InvalidValue: the graph was destroyed or has a cycle.
        NotSupported: a graph with memory nodes instantiated a second time.
        InvalidConfiguration: a kernel node exceeds the device's limits.
        InvalidDevicePointer: a kernel node holds a pointer of a device ``configure_devices``
            replaced since it was added.
        RaceError: ``check_races`` found unordered conflicting nodes.
    """
    flags, device, options = request.flags, request.device, request.options
    kernel_type = NodeType.Kernel  # held here: an enum member read per node costs
    with graph.lock:
        check_instantiable(graph)
        exec_graph, originals = snapshot_sources(graph)  # InvalidValue on a cycle, nothing made
        # No child graph and no conditional node (every captured chain of kernels): no body to
        # copy, and the handle arguments are looked for in the kernel list made below.
        plain = exec_graph.flat and not exec_graph.has_type(NodeType.Conditional)
        conditionals = None if plain else prepare_conditionals(exec_graph)  # bodies, handles
    # The kernel nodes' parameters in the copy's order, where the order matters (the first
    # failing launch shape, the handle arguments): a function, so that a copy holding its
    # parameters as read (see ExecGraph.read_order) is not permuted for them.
    in_order: Callable[[], list[Any]]
    if plain:  # the columns: no node record is made
        if exec_graph.only(kernel_type):  # kernel nodes only (most large graphs): no test each
            in_order = exec_graph.params_column  # read only, as the column is
            # The same parameters in the order the copy read them (memory order, for a graph
            # put in Kahn's order by positions): for what does not depend on the order.
            read = originals.params
        else:
            kinds, every_params = exec_graph.types(), exec_graph.params_column()
            read = list(compress(every_params, map(is_, kinds, repeat(kernel_type))))
            in_order = read.copy
        per_kernel = _per_kernel(read)
        conditionals = prepare_plain(in_order, per_kernel)  # None: no handle argument
    check_foreign_handles(conditionals, graph)
    if conditionals is not None or not plain:
        if conditionals is None and exec_graph.flat:  # the columns: no node record is made
            kinds, every_params = exec_graph.types(), exec_graph.params_column()
        else:
            every = exec_graph.walk() if conditionals is None else conditionals.walk(exec_graph)
            kinds, every_params = [n.type for n in every], [n.params for n in every]
        read = list(compress(every_params, map(is_, kinds, repeat(kernel_type))))
        in_order = read.copy
        per_kernel = _per_kernel(read)
    if not plain or graph._replacements_seen != replacements():  # else: none can be stale
        check_pointer_origins(read, _memory_node_params(exec_graph))
    # Added against the default device's limits; this executable runs on its own. Nodes of one
    # launch shape pass or fail alike: check each shape once, in the order nodes first have it.
    # Nodes sharing one Threads object share its shape (a launch shape's Threads is made once
    # per shape, see runtime/params.py; a Threads hashes by identity): one node per Threads
    # first, in the order nodes first have it, then one per shape, without a key tuple made
    # per node.
    threads = list(map(_threads_of, read))
    uniform: tuple[Any, Any] | None = None  # the one kernel and launch shape of every node
    if threads and threads.count(threads[0]) == len(threads):  # identity first, in C
        by_threads = read[:1]
        if len(per_kernel) == 1:
            uniform = (read[0].kernel, threads[0])
    else:
        kernels = in_order()
        by_threads = list(dict(zip(map(_threads_of, kernels), kernels, strict=True)).values())
    shapes = zip(
        map(_grid, by_threads), map(_block, by_threads), map(_shared_mem, by_threads), strict=True
    )
    for params in dict(zip(shapes, by_threads, strict=True)).values():
        params.check_limits(device)
    races: ExecRaces | None = None
    if options.get("check_races", False):  # before anything is built: a race changes nothing
        bodies = conditionals.bodies if conditionals is not None else None
        races, reports = check_exec_graph(exec_graph, originals.in_order(), graph, bodies)
        if reports:
            raise RaceError(reports)
    sources = originals.source_map(exec_graph)  # the map is made by the first setter
    max_streams = min(MAX_PARALLEL_STREAMS, len(device.queues))
    plan = plan_graph(
        exec_graph,
        max_streams=max_streams,
        use_priority=flags is InstantiateFlags.USE_NODE_PRIORITY,
    )
    # A node's slot size depends on its kernel only: one sum per kernel, times its node count.
    arg_bytes = sum(
        -(-max(kernel.layout.size, 1) // 16) * 16 * count for kernel, count in per_kernel.items()
    )
    arena = KernelArgArena(
        device,
        arg_bytes + options.get("arena_headroom", HEADROOM_BYTES),
        strict=options.get("strict_flush", False),
    )
    pool: SignalSetPool | None = None
    internal_streams: list[Stream] = []
    try:
        if conditionals is not None:  # handle cells, and kernels pointed at them
            conditionals.allocate(device)
            conditionals.bind_all(exec_graph)
        compiled = compile_plan(
            exec_graph,
            plan,
            device,
            arena,
            auto_free=flags is InstantiateFlags.AUTO_FREE_ON_LAUNCH,
            conditionals=conditionals,
            uniform=uniform,
        )
        pool = SignalSetPool(
            plan.num_signals,
            extra=compiled.extra,
            num_sets=options.get("signal_sets", 16),
            wait_when_empty=signal_set_policy(options) == "wait",
        )
        for _ in range(plan.num_strands - 1):
            internal_streams.append(Stream._create(device, non_blocking=True, owned=True))
        user_objects = list(exec_graph.user_objects)
        if conditionals is not None:  # bodies' user objects too, each once
            user_objects = list(dict.fromkeys(user_objects + conditionals.user_objects))
        holder = object()
        with graph.lock:  # the graph may have changed hands while we prepared
            check_instantiable(graph)
            if request.upload:  # destroyed while we built (user code, another thread): refused
                launch_stream(request.upload_stream, device)  # before the graph is marked
            graph._mark_instantiated(compiled.alloc_ptrs)  # the executable owns these ranges
            # A reference to each user object for the executable, taken while the graph still
            # owns it: a graph destroyed (or releasing it) on another thread from here on can
            # no longer run a destructor the executable counts on. ``holder`` owns them (an
            # owner's references, which a program's ``destroy()`` leaves alone) until the
            # executable adopts its own; nothing after this can fail.
            for obj in user_objects:
                obj._adopt(holder, 1)
    except BaseException:
        arena.close()
        if pool is not None:
            pool.close()
        for stream in internal_streams:
            stream.destroy()
        if conditionals is not None:
            conditionals.free(device)
        raise
    return Instantiated(
        flags=flags,
        device=device,
        graph=exec_graph,
        sources=sources,
        plan=plan,
        compiled=compiled,
        arena=arena,
        pool=pool,
        internal_streams=internal_streams,
        conditionals=conditionals,
        races=races,
        user_objects=user_objects,
        holder=holder,
    )


def _per_kernel(kernel_params: list[Any]) -> Mapping[Any, int]:
    """Each kernel of ``kernel_params``, once, with its node count (kernels hash by identity).

    Most large graphs run one kernel: a list of the kernels and one identity count (both in C)
    find that for less than a count per node in a ``Counter``.
    """
    kernels = list(map(_kernel_of, kernel_params))
    if kernels and kernels.count(kernels[0]) == len(kernels):
        return {kernels[0]: len(kernels)}
    return Counter(kernels)


def check_instantiable(graph: Graph) -> None:
    """HIP's instantiate checks on the graph itself. Call with the graph's lock held."""
    graph._check_alive()
    if graph.has_mem_nodes and graph.instantiated:
        raise NotSupported("a graph with memory nodes can be instantiated only once")


def _check_options(options: dict[str, Any]) -> None:
    """Reject a misspelt or mistyped instantiate option instead of silently ignoring it."""
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        known = ", ".join(["device", *_OPTIONS])
        raise TypeError(f"unknown instantiate option(s) {', '.join(unknown)}; known: {known}")
    for name, value in options.items():
        types = _OPTIONS[name]
        if types == (int,):  # the integer rule (core/ints.py): numpy integers too, kept as int
            options[name] = as_int(value, f"instantiate option {name}", expected="int")
        elif not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            names = " or ".join(t.__name__ for t in types)
            raise TypeError(f"instantiate option {name} must be {names}, got {value!r}")
    for name in ("signal_sets", "num_sets"):
        if not 1 <= options.get(name, 1) <= _MAX_SIGNAL_SETS:
            raise ValueError(f"{name} must be in 1..{_MAX_SIGNAL_SETS}, got {options[name]}")
    if options.get("arena_headroom", 0) < 0:
        raise ValueError(f"arena_headroom must be >= 0, got {options['arena_headroom']}")


def _merge_num_sets(options: dict[str, Any]) -> None:
    """Fold ``num_sets`` into ``signal_sets``: two spellings of the sets prepopulated.

    Raises:
        ValueError: both given, with different values.
    """
    if "num_sets" in options:
        num_sets = options.pop("num_sets")
        if options.setdefault("signal_sets", num_sets) != num_sets:
            raise ValueError(
                f"num_sets={num_sets} contradicts signal_sets={options['signal_sets']}"
            )


def signal_set_policy(options: dict[str, Any]) -> str:
    """What a launch does when every signal set is in use: the one acquire policy.

    ``signal_set_policy="wait"`` (the default) parks the launch until a completion returns a
    set; ``"grow"`` adds a set (HIP's counted miss). ``wait_for_signal_sets=True/False`` is
    the older spelling of the same choice.

    Raises:
        ValueError: another policy, or two spellings that disagree.
    """
    policy = options.get("signal_set_policy")
    legacy = options.get("wait_for_signal_sets")
    if policy is not None and policy not in ("wait", "grow"):
        raise ValueError(f"signal_set_policy must be 'wait' or 'grow', got {policy!r}")
    if legacy is not None:
        spelled = "wait" if legacy else "grow"
        if policy is not None and policy != spelled:
            raise ValueError(f"signal_set_policy={policy!r} contradicts wait_for_signal_sets")
        policy = spelled
    return policy or "wait"
