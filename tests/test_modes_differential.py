"""One random program, every way of running it, one answer (DESIGN.md invariant 5).

``test_exec_random`` and ``test_capture_random`` compare a graph, an eager run and numpy over
kernels, 1D copies, byte fills, host, empty and child nodes. This file widens both axes:

* what a program holds: kernels of several launch shapes and argument layouts, async kernel
  bodies and async host functions, linear copies between device buffers and to and from a host
  array, pitched 2D/3D copies, copies to and from a device symbol, fills of 1-, 2- and 4-byte
  elements and 2D fills, a scratch buffer allocated, written, read and freed inside the graph,
  IF/WHILE/SWITCH nodes whose value a kernel sets from the data or the handle's default gives,
  and nested child graphs;
* how it is run (``MODES``): eagerly on one stream; built by hand and launched up to 20 times
  without waiting; cloned; made from other constants then ``exec.update``-d, between launches
  in flight too; changed through the per-node setters between launches in flight; as two
  executables of one graph in turns; with its graph edited after instantiate; with nodes
  disabled and enabled between launches; captured from three streams that fork and join
  through events, recaptured with other constants and updated, captured into a hand-built
  graph, or with its conditional bodies captured into; split in two graphs ordered by event
  record/wait nodes (or a graph and a stream, either way), launched in turns; beside another
  program on its own buffers; launched on another device's stream; with each instantiate flag
  (and the race check, which must raise no false alarm); on device 1; and on uvloop.

Every buffer is bytes, so the numpy reference is exact for every operation; the kernel update
``dst = dst * 3 + mul * src + add`` is not idempotent, so a node run twice, skipped, or run
before what it depends on shows. Each program ends by checking that nothing leaked: device
memory, the executables' launches in flight and their signal sets.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg

NB = 128  # bytes per buffer
N64 = NB // 8
BUFS = 8
SYM = BUFS  # the symbol's index in the reference's list of byte arrays
HOST = BUFS + 1  # the host array's (the host end of H2D and D2H copies)
SYMBOLS = [ahg.device_symbol(f"modes_differential_symbol_{i}", NB) for i in range(2)]


@ahg.kernel
def affine(t: ahg.Threads, n: ahg.int32, mul: ahg.int64, add: ahg.int64,
           src: ahg.Ptr[ahg.int64], dst: ahg.Ptr[ahg.int64]) -> None:  # fmt: skip
    i = t.ids[t.ids < n]
    dst[i] = dst[i] * 3 + mul * src[i] + add


@ahg.kernel
async def affine_async(t: ahg.Threads, n: ahg.int32, mul: ahg.int64, add: ahg.int64,
                       src: ahg.Ptr[ahg.int64], dst: ahg.Ptr[ahg.int64]) -> None:  # fmt: skip
    """The same update from an async body that yields half-way."""
    i = t.ids[t.ids < n]
    old = dst[i] * 3
    await asyncio.sleep(0)
    dst[i] = old + mul * src[i] + add


@ahg.kernel
def affine_wide(t: ahg.Threads, dst: ahg.Ptr[ahg.int64], flag: ahg.int8, add: ahg.int32,
                src: ahg.Ptr[ahg.int64], mul: ahg.int16, n: ahg.int64) -> None:  # fmt: skip
    """The same update, its arguments in another order and other widths (another layout)."""
    i = t.ids[t.ids < n]
    dst[i] = dst[i] * 3 + np.int64(mul) * src[i] + np.int64(add)


@ahg.kernel
def decide(t: ahg.Threads, src: ahg.Ptr[ahg.int64], bias: ahg.int64, modulus: ahg.int64,
           h: ahg.CondHandle) -> None:  # fmt: skip
    """The condition from the data: ``(src[0] + bias) mod modulus``."""
    ahg.set_conditional(h, (int(src[0]) + int(bias)) % int(modulus))


@ahg.kernel
def start_count(t: ahg.Threads, src: ahg.Ptr[ahg.int64], bias: ahg.int64,
                counter: ahg.Ptr[ahg.int64], h: ahg.CondHandle) -> None:  # fmt: skip
    """A WHILE's trip count from the data: ``(src[0] + bias) mod 4``."""
    counter[0] = (int(src[0]) + int(bias)) % 4
    ahg.set_conditional(h, 1 if counter[0] > 0 else 0)


@ahg.kernel
def count_down(t: ahg.Threads, counter: ahg.Ptr[ahg.int64], h: ahg.CondHandle) -> None:
    counter[0] -= 1
    ahg.set_conditional(h, 1 if counter[0] > 0 else 0)


def bump(device: ahg.Device, ptr: ahg.DevicePtr, add: int) -> None:
    view = device.view(ptr, np.int64, N64)
    view += add


async def bump_async(device: ahg.Device, ptr: ahg.DevicePtr, add: int) -> None:
    await asyncio.sleep(0)
    bump(device, ptr, add)


# -- programs --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One operation. ``kind`` picks the meaning of ``a`` (its integer parameters)."""

    kind: str
    dst: int = 0
    src: int = 0
    a: tuple[int, ...] = ()
    body: tuple[tuple[Op, ...], ...] = ()  # child graph: one body; conditionals: their bodies

    def reads(self) -> set[int]:
        found = {SOURCES.get(self.kind, self.src)} if self.kind in READERS else set()
        for body in self.body:
            for op in body:
                found |= op.reads() | op.writes()
        return found

    def writes(self) -> set[int]:
        found = {TARGETS.get(self.kind, self.dst)} if self.kind in WRITERS else set()
        for body in self.body:
            for op in body:
                found |= op.writes()
        return found


WRITERS = {"kernel", "akernel", "host", "ahost", "memset", "memset2d", "copy", "copy3d",
           "to_sym", "from_sym", "h2d", "d2h", "scratch"}  # fmt: skip
READERS = {"kernel", "akernel", "copy", "copy3d", "to_sym", "from_sym", "h2d", "d2h", "scratch",
           "if", "switch", "while"}  # fmt: skip
SOURCES = {"from_sym": SYM, "h2d": HOST}  # what an op reads, when not its ``src`` buffer
TARGETS = {"to_sym": SYM, "d2h": HOST}  # what an op writes, when not its ``dst`` buffer
SIMPLE = ("kernel", "akernel", "host", "ahost", "memset", "memset2d", "copy", "copy3d",
          "to_sym", "from_sym", "h2d", "d2h")  # fmt: skip
CAN_DISABLE = {"kernel", "akernel", "memset", "memset2d", "copy", "copy3d", "to_sym", "from_sym",
               "h2d", "d2h"}  # fmt: skip


def pitched_region(rng: random.Random) -> tuple[int, ...]:
    """A 3D copy inside two ``NB``-byte buffers: extent, pitches, slice heights, positions."""
    while True:
        w, h, d = rng.randint(1, 12), rng.randint(1, 4), rng.randint(1, 2)
        sides = []
        for _ in range(2):
            pitch = rng.choice([w, w + 3, 16, 24])
            if pitch < w:
                pitch = w
            sh = h + rng.randint(0, 1)
            x, y, z = rng.randint(0, 3), rng.randint(0, 1), rng.randint(0, 1)
            sides.append((pitch, sh, x, y, z))
        if all(
            ((z + d - 1) * sh + (y + h - 1)) * p + x + w <= NB and y + h <= sh
            for p, sh, x, y, z in sides
        ):
            return (w, h, d, *sides[0], *sides[1])


def kernel_constants(rng: random.Random, kind: str) -> tuple[int, ...]:
    """mul, add, a launch shape and (a synchronous kernel's) argument layout."""
    layout = rng.randrange(2) if kind == "kernel" else 0
    return (rng.randint(-3, 3), rng.randint(-50, 50), rng.randrange(5), layout)


def random_op(rng: random.Random, depth: int, memory_ok: bool, host_ok: bool) -> Op:
    kinds = [kind for kind in SIMPLE if host_ok or kind not in ("host", "ahost")] * 3
    if depth < 2:
        kinds += ["child", "if", "switch", "while"]
    if memory_ok:
        kinds += ["scratch"]
    kind = rng.choice(kinds)
    dst, src = rng.randrange(BUFS), rng.randrange(BUFS)
    if kind in ("copy", "copy3d") and src == dst:
        src = (dst + 1) % BUFS
    if kind in ("kernel", "akernel"):
        return Op(kind, dst, src, kernel_constants(rng, kind))
    if kind == "scratch":  # how the scratch is filled (1D or pitched copy), where it is read
        how = (rng.randrange(2), rng.randrange(2))
        return Op(kind, dst, src, (rng.randint(-3, 3), rng.randint(-50, 50), *how))
    if kind in ("host", "ahost"):
        return Op(kind, dst, a=(rng.randint(1, 9),))
    if kind == "memset":
        es = rng.choice([1, 2, 4])
        count = rng.randint(1, NB // es)
        offset = rng.randint(0, NB // es - count) * es
        return Op(kind, dst, a=(rng.randrange(1 << (8 * es)), es, count, offset))
    if kind == "memset2d":
        es = rng.choice([1, 2, 4])
        width = rng.randint(1, 4)
        pitch = es * width + rng.choice([0, 4, 8])
        height = rng.randint(1, NB // pitch)
        return Op(kind, dst, a=(rng.randrange(1 << (8 * es)), es, width, height, pitch))
    if kind in ("copy", "h2d", "d2h"):  # (nbytes, destination offset, source offset)
        nbytes = rng.randint(1, NB)
        return Op(
            kind, dst, src, (nbytes, rng.randint(0, NB - nbytes), rng.randint(0, NB - nbytes))
        )
    if kind == "copy3d":
        return Op(kind, dst, src, pitched_region(rng))
    if kind in ("to_sym", "from_sym"):
        nbytes = rng.choice([8, 16, 40, NB])
        return Op(kind, dst, src, (nbytes, rng.randint(0, (NB - nbytes) // 8) * 8))
    if kind == "child":
        body = random_program(rng, rng.randint(1, 4), depth + 1, False, host_ok)
        return Op(kind, body=(body,))
    size = {"if": rng.randint(1, 2), "switch": rng.randint(1, 3), "while": 1}[kind]
    # a conditional body cannot hold host nodes (NotSupported, as HIP)
    bodies = tuple(
        random_program(rng, rng.randint(1, 3), depth + 1, False, False) for _ in range(size)
    )
    how = 0 if kind == "while" else rng.choice([0, 0, 1, 2])  # see condition()
    return Op(kind, src=src, a=(rng.randint(-9, 9), how), body=bodies)


def random_program(rng: random.Random, size: int, depth: int = 0, memory_ok: bool = True,
                   host_ok: bool = True) -> tuple[Op, ...]:  # fmt: skip
    return tuple(random_op(rng, depth, memory_ok, host_ok) for _ in range(size))


def flat(program: Sequence[Op]) -> bool:
    """Whether the program holds only operations a stream can capture without a condition."""
    return all(op.kind in SIMPLE or op.kind == "scratch" or
               (op.kind == "child" and flat(op.body[0])) for op in program)  # fmt: skip


def holds(program: Sequence[Op], kinds: set[str]) -> bool:
    """Whether ``program`` holds an op of one of ``kinds``, at any depth."""
    return any(op.kind in kinds or any(holds(body, kinds) for body in op.body) for op in program)


def perturb(program: tuple[Op, ...], rng: random.Random, scratch: bool = True) -> tuple[Op, ...]:
    """The same topology, buffers and node kinds with other constants, sizes and offsets (for
    update and setters).

    A conditional node's bodies keep theirs (an executable keeps the bodies it was made with),
    and so does a child graph holding one; a scratch op's only with ``scratch`` (its kernel is
    not the node that stands for it, so the setters leave it alone).
    """
    out = []
    for op in program:
        kind = op.kind
        if kind in ("kernel", "akernel"):
            op = replace(op, a=kernel_constants(rng, kind))
        elif kind == "scratch" and scratch:
            op = replace(op, a=(rng.randint(-3, 3), rng.randint(-50, 50), *op.a[2:]))
        elif kind in ("host", "ahost"):
            op = replace(op, a=(rng.randint(1, 9),))
        elif kind == "memset":
            es = op.a[1]
            count = rng.randint(1, NB // es)
            offset = rng.randint(0, NB // es - count) * es
            op = replace(op, a=(rng.randrange(1 << (8 * es)), es, count, offset))
        elif kind == "memset2d":
            op = replace(op, a=(rng.randrange(1 << (8 * op.a[1])), *op.a[1:]))
        elif kind in ("copy", "h2d", "d2h"):
            nbytes = rng.randint(1, NB)
            offsets = (rng.randint(0, NB - nbytes), rng.randint(0, NB - nbytes))
            op = replace(op, a=(nbytes, *offsets))
        elif kind == "copy3d":
            op = replace(op, a=pitched_region(rng))
        elif kind in ("to_sym", "from_sym"):
            nbytes = rng.choice([8, 16, 40, NB])
            op = replace(op, a=(nbytes, rng.randint(0, (NB - nbytes) // 8) * 8))
        elif kind == "child" and not holds(op.body[0], {"if", "switch", "while"}):
            op = replace(op, body=(perturb(op.body[0], rng),))
        elif kind in ("if", "switch", "while") and op.a[1] == 0:
            op = replace(op, a=(rng.randint(-9, 9), 0))
        out.append(op)
    return tuple(out)


# -- the numpy reference -----------------------------------------------------------------------


def pitched_offsets(a: tuple[int, ...]) -> tuple[list[int], list[int], int]:
    w, h, d, dp, dsh, dx, dy, dz, sp, ssh, sx, sy, sz = a
    dst = [((dz + k) * dsh + dy + j) * dp + dx for k in range(d) for j in range(h)]
    src = [((sz + k) * ssh + sy + j) * sp + sx for k in range(d) for j in range(h)]
    return dst, src, w


def condition(op: Op, first: int) -> int:
    """A conditional op's value: what its deciding kernel sets from its source's first int64
    (``a[1]`` 0), or the handle's default, assigned at every launch (1) or once (2)."""
    bias, how = op.a
    modulus = {"if": 2, "switch": 4, "while": 4}[op.kind]
    return (first + bias if how == 0 else bias) % modulus


def chosen_body(op: Op, value: int) -> int | None:
    """The body an IF or SWITCH runs for ``value``: an IF runs its first body on a non-zero
    value and its second (else) body, if any, on zero; a SWITCH runs body ``value``, none past
    the last."""
    index = (0 if value else 1) if op.kind == "if" else value
    return index if index < len(op.body) else None


def reference(program: Sequence[Op], data: list[np.ndarray], disabled: frozenset[int] = frozenset(),
              ) -> None:  # fmt: skip
    """Run ``program`` on byte arrays; ``disabled`` holds indices of top-level ops skipped."""
    for index, op in enumerate(program):
        if index in disabled:
            continue
        kind, dst, src = op.kind, op.dst, op.src
        if kind in ("kernel", "akernel", "scratch"):
            out = data[dst].view(np.int64)
            out[:] = out * 3 + op.a[0] * data[src].view(np.int64) + op.a[1]
        elif kind in ("host", "ahost"):
            out = data[dst].view(np.int64)
            out += op.a[0]
        elif kind == "memset":
            value, es, count, offset = op.a
            fill = np.full(count, value, dtype=f"<u{es}").view(np.uint8)
            data[dst][offset : offset + count * es] = fill
        elif kind == "memset2d":
            value, es, width, height, pitch = op.a
            row = np.full(width, value, dtype=f"<u{es}").view(np.uint8)
            for r in range(height):
                data[dst][r * pitch : r * pitch + width * es] = row
        elif kind in ("copy", "h2d", "d2h"):
            nbytes, doff, soff = op.a
            to, origin = TARGETS.get(kind, dst), SOURCES.get(kind, src)
            data[to][doff : doff + nbytes] = data[origin][soff : soff + nbytes]
        elif kind == "copy3d":
            douts, souts, w = pitched_offsets(op.a)
            rows = [data[src][s : s + w].copy() for s in souts]
            for d, row in zip(douts, rows, strict=True):
                data[dst][d : d + w] = row
        elif kind == "to_sym":
            nbytes, offset = op.a
            data[SYM][offset : offset + nbytes] = data[src][:nbytes]
        elif kind == "from_sym":
            nbytes, offset = op.a
            data[dst][:nbytes] = data[SYM][offset : offset + nbytes]
        elif kind == "child":
            reference(op.body[0], data)
        elif kind == "while":
            for _ in range(condition(op, int(data[src].view(np.int64)[0]))):
                reference(op.body[0], data)
        else:
            chosen = chosen_body(op, condition(op, int(data[src].view(np.int64)[0])))
            if chosen is not None:
                reference(op.body[chosen], data)


# -- the device side ---------------------------------------------------------------------------


@dataclass
class World:
    """Buffers on one device, their initial bytes, and what a run must give back."""

    device: ahg.Device
    bufs: list[ahg.DevicePtr]
    initial: list[np.ndarray]
    host: np.ndarray  # the host end of H2D and D2H copies (a copy reads it when it runs)
    symbol: Any  # a device symbol of its own
    counters: dict[int, ahg.DevicePtr] = field(default_factory=dict)  # per WHILE op (its id)

    @classmethod
    def make(cls, device: ahg.Device, seed: int, symbol: int = 0) -> World:
        gen = np.random.default_rng(seed)
        bufs = [device.malloc(NB) for _ in range(BUFS)]
        initial = [gen.integers(0, 256, NB, dtype=np.uint8) for _ in range(BUFS + 2)]
        return cls(device, bufs, initial, initial[HOST].copy(), SYMBOLS[symbol])

    def counter(self, op: Op) -> ahg.DevicePtr:
        """A WHILE op's trip counter, the same in every graph built from the op (so an update
        to a graph of the same program finds the same bodies)."""
        if id(op) not in self.counters:
            self.counters[id(op)] = self.device.malloc(8)
        return self.counters[id(op)]

    async def reset(self, stream: ahg.Stream) -> None:
        """Put the initial bytes back (the host array at once: nothing may be in flight)."""
        for buf, init in zip(self.bufs, self.initial, strict=False):
            await stream.memcpy(buf, init)
        await stream.memcpy_to_symbol(self.symbol, self.initial[SYM])
        self.host[:] = self.initial[HOST]

    async def read(self, stream: ahg.Stream) -> list[np.ndarray]:
        await stream.synchronize()
        out = [self.device.view(buf, np.uint8, NB).copy() for buf in self.bufs]
        sym = np.zeros(NB, dtype=np.uint8)
        await stream.memcpy_from_symbol(sym, self.symbol)
        await stream.synchronize()
        return [*out, sym, self.host.copy()]

    def free(self) -> None:
        for ptr in [*self.bufs, *self.counters.values()]:
            self.device.free(ptr)


def kernel_args(world: World, op: Op, src: ahg.DevicePtr | None = None) -> tuple[Any, ...]:
    """The arguments of ``kernel_of(op)``."""
    source = world.bufs[op.src] if src is None else src
    if op.kind == "kernel" and op.a[3]:
        return (world.bufs[op.dst], 1, op.a[1], source, op.a[0], N64)
    return (N64, op.a[0], op.a[1], source, world.bufs[op.dst])


def linear(world: World, op: Op) -> tuple[Any, Any, int]:
    """A linear copy's destination, source and size: device pointers or host array slices."""
    nbytes, doff, soff = op.a
    dst = world.host[doff : doff + nbytes] if op.kind == "d2h" else world.bufs[op.dst] + doff
    src = world.host[soff : soff + nbytes] if op.kind == "h2d" else world.bufs[op.src] + soff
    return dst, src, nbytes


def scratch_rows(world: World, op: Op, scratch: ahg.DevicePtr) -> tuple[Any, Any]:
    """A scratch buffer and its op's source as 16-byte rows, for a pitched fill."""
    return ahg.PitchedPtr(scratch, 16), ahg.PitchedPtr(world.bufs[op.src], 16)


SHAPES = ((1, N64), (2, N64 // 2), (4, 4), (1, 2 * N64), (3, 8))  # (grid, block), enough threads


def shape(op: Op) -> tuple[int, int]:
    """A kernel op's launch shape: every shape has a thread per element, some more."""
    return SHAPES[op.a[2]]


def kernel_of(op: Op) -> Any:
    if op.kind == "akernel":
        return affine_async
    return affine_wide if op.a[3] else affine


def host_of(op: Op) -> Any:
    return bump_async if op.kind == "ahost" else bump


def pitched(world: World, op: Op) -> tuple[Any, ...]:
    w, h, d, dp, dsh, dx, dy, dz, sp, ssh, sx, sy, sz = op.a
    dst = ahg.PitchedPtr(world.bufs[op.dst], dp, dsh)
    src = ahg.PitchedPtr(world.bufs[op.src], sp, ssh)
    return dst, src, (w, h, d), (dx, dy, dz), (sx, sy, sz)


def memset_args(world: World, op: Op) -> tuple[tuple[Any, ...], dict[str, int]]:
    if op.kind == "memset":
        value, es, count, offset = op.a
        return (world.bufs[op.dst] + offset, value, count), {"element_size": es}
    value, es, width, height, pitch = op.a
    return (world.bufs[op.dst], value, width), {"element_size": es, "height": height,
                                                "pitch": pitch}  # fmt: skip


async def run_eager(stream: ahg.Stream, world: World, program: Sequence[Op]) -> None:
    """The program node by node on one stream; a condition is read back from the device."""
    device = world.device
    for op in program:
        kind = op.kind
        if kind in ("kernel", "akernel"):
            await stream.launch_kernel(kernel_of(op), *shape(op), kernel_args(world, op))
        elif kind in ("host", "ahost"):
            await stream.launch_host_func(host_of(op), device, world.bufs[op.dst], op.a[0])
        elif kind == "memset":
            (dst, value, count), kw = memset_args(world, op)
            await stream.memset(dst, value, count, **kw)
        elif kind == "memset2d":  # a stream fills rows one at a time
            value, es, width, height, pitch = op.a
            for r in range(height):
                await stream.memset(world.bufs[op.dst] + r * pitch, value, width, element_size=es)
        elif kind in ("copy", "h2d", "d2h"):
            await stream.memcpy(*linear(world, op))
        elif kind == "copy3d":
            dst, src, extent, dpos, spos = pitched(world, op)
            if extent[2] == 1 and dpos == spos == (0, 0, 0):
                await stream.memcpy_2d(dst.ptr, dst.pitch, src.ptr, src.pitch, *extent[:2])
            else:
                await stream.memcpy_3d(dst, src, extent, dst_pos=dpos, src_pos=spos)
        elif kind == "to_sym":
            await stream.memcpy_to_symbol(world.symbol, world.bufs[op.src], op.a[0], op.a[1])
        elif kind == "from_sym":
            await stream.memcpy_from_symbol(world.bufs[op.dst], world.symbol, op.a[0], op.a[1])
        elif kind == "scratch":
            scratch = await stream.malloc_async(NB)
            if op.a[2]:
                await stream.memcpy_3d(*scratch_rows(world, op, scratch), (16, NB // 16, 1))
            else:
                await stream.memcpy(scratch, world.bufs[op.src], NB)
            await stream.launch_kernel(affine, 1, N64, kernel_args(world, op, scratch))
            await stream.free_async(scratch)
        elif kind == "child":
            await run_eager(stream, world, op.body[0])
        else:
            await stream.synchronize()
            value = condition(op, int(device.view(world.bufs[op.src], np.int64, 1)[0]))
            if kind == "while":
                for _ in range(value):
                    await run_eager(stream, world, op.body[0])
            elif (chosen := chosen_body(op, value)) is not None:
                await run_eager(stream, world, op.body[chosen])


@dataclass
class Built:
    """A graph and, per top-level op, the node that stands for it (the last one it added)."""

    graph: ahg.Graph
    nodes: list[ahg.GraphNode]
    firsts: list[ahg.GraphNode]  # per op, its first node (what its dependencies point to)


Tail = Callable[[list[ahg.GraphNode]], Any] | None  # what a body gets after its ops
Later = list[tuple[ahg.Graph, Sequence[Op], Tail]] | None  # conditional bodies left to fill


def build(world: World, program: Sequence[Op], graph: ahg.Graph | None = None,
          priorities: random.Random | None = None, later: Later = None) -> Built:  # fmt: skip
    """The program as a graph; each op depends on every earlier op touching one of its buffers.

    ``priorities``, if given, draws a launch priority for every kernel node. With ``later``,
    a conditional body that a stream can capture is left empty and listed there instead.
    """
    graph = ahg.Graph() if graph is None else graph
    nodes: list[ahg.GraphNode] = []
    firsts: list[ahg.GraphNode] = []
    touched: list[set[int]] = []
    for op in program:
        mine = op.reads() | op.writes()
        deps = [nodes[i] for i, other in enumerate(touched) if other & mine]
        first, last = add_op(world, graph, op, deps, priorities, later)
        firsts.append(first)
        nodes.append(last)
        touched.append(mine)
    return Built(graph, nodes, firsts)


def fill_body(world: World, body: ahg.Graph, ops: Sequence[Op], tail: Tail, later: Later) -> None:
    """Build a conditional body now, or list it in ``later`` to be captured into."""
    if later is not None and ops and flat(ops):
        later.append((body, ops, tail))
        return
    inner = build(world, ops, body, later=later)
    if tail is not None:
        tail(inner.nodes)


def add_op(world: World, graph: ahg.Graph, op: Op, deps: list[ahg.GraphNode],
           priorities: random.Random | None, later: Later = None,
           ) -> tuple[ahg.GraphNode, ahg.GraphNode]:  # fmt: skip
    kind, bufs = op.kind, world.bufs
    if kind in ("kernel", "akernel"):
        prio = priorities.randint(-1, 1) if priorities else 0
        node = graph.add_kernel_node(
            kernel_of(op), *shape(op), kernel_args(world, op), priority=prio, deps=deps
        )
    elif kind in ("host", "ahost"):
        node = graph.add_host_node(host_of(op), (world.device, bufs[op.dst], op.a[0]), deps=deps)
    elif kind in ("memset", "memset2d"):
        args, kw = memset_args(world, op)
        node = graph.add_memset_node(*args, **kw, deps=deps)
    elif kind in ("copy", "h2d", "d2h"):
        node = graph.add_memcpy_node(*linear(world, op), deps=deps)
    elif kind == "copy3d":
        dst, src, extent, dpos, spos = pitched(world, op)
        node = graph.add_memcpy_3d_node(dst, src, extent, dst_pos=dpos, src_pos=spos, deps=deps)
    elif kind == "to_sym":
        node = graph.add_memcpy_node_to_symbol(
            world.symbol, bufs[op.src], op.a[0], op.a[1], deps=deps
        )
    elif kind == "from_sym":
        node = graph.add_memcpy_node_from_symbol(
            bufs[op.dst], world.symbol, op.a[0], op.a[1], deps=deps
        )
    elif kind == "scratch":
        alloc = graph.add_mem_alloc_node(NB, device=world.device.ordinal, deps=deps)
        scratch = alloc.get_mem_alloc_params().ptr
        if op.a[2]:
            dst, src = scratch_rows(world, op, scratch)
            fill = graph.add_memcpy_3d_node(dst, src, (16, NB // 16, 1), deps=[alloc])
        else:
            fill = graph.add_memcpy_node(scratch, bufs[op.src], NB, deps=[alloc])
        args = kernel_args(world, op, scratch)
        if op.a[3]:  # read through a child graph's kernel
            child = ahg.Graph()
            child.add_kernel_node(affine, 1, N64, args)
            use = graph.add_child_graph_node(child, deps=[fill])
            child.destroy()
        else:
            use = graph.add_kernel_node(affine, 1, N64, args, deps=[fill])
        return alloc, graph.add_mem_free_node(scratch, deps=[use])
    elif kind == "child":
        child = build(world, op.body[0]).graph
        node = graph.add_child_graph_node(child, deps=deps)
        child.destroy()  # the node embeds its own copy
    else:
        bias, how = op.a
        modulus = 2 if kind == "if" else 4
        handle = graph.conditional_handle(bias % modulus if how else 0, assign_default=how != 2)
        if kind == "while":
            counter = world.counter(op)
            start = graph.add_kernel_node(start_count, 1, 1,
                                          (bufs[op.src], bias, counter, handle),
                                          deps=deps)  # fmt: skip
            node, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.While,
                                                       deps=[start])  # fmt: skip

            def count(sinks: list[ahg.GraphNode]) -> None:
                body.add_kernel_node(count_down, 1, 1, (counter, handle), deps=sinks)

            fill_body(world, body, op.body[0], count, later)
            return start, node
        cond_kind = ahg.ConditionalKind.If if kind == "if" else ahg.ConditionalKind.Switch
        if how:  # the handle's default decides
            node, bodies = graph.add_conditional_node(handle, cond_kind, len(op.body), deps=deps)
            start = node
        else:
            args = (bufs[op.src], bias, modulus, handle)
            start = graph.add_kernel_node(decide, 1, 1, args, deps=deps)
            node, bodies = graph.add_conditional_node(handle, cond_kind, len(op.body),
                                                      deps=[start])  # fmt: skip
        for ops, body in zip(op.body, bodies, strict=True):
            fill_body(world, body, ops, None, later)
        return start, node
    return node, node


async def play_on_streams(world: World, streams: list[ahg.Stream], program: Sequence[Op],
                          rng: random.Random, events: list[ahg.Event]) -> None:  # fmt: skip
    """Issue a flat program over several streams, ordered through events where buffers meet.

    Stream 0 forks the others in first and joins them back last, so this is a valid capture.
    """

    async def order(src: int, dst: int) -> None:
        if src != dst:
            event = world.device.create_event()
            events.append(event)
            await streams[src].record_event(event)
            await streams[dst].wait_event(event)

    for s in range(1, len(streams)):
        await order(0, s)
    last: dict[int, int] = {}
    for op in program:
        s = rng.randrange(len(streams))
        for buf in sorted(op.reads() | op.writes()):
            if last.get(buf, s) != s:
                await order(last[buf], s)
            last[buf] = s
        await run_eager(streams[s], world, [op])
    for s in range(1, len(streams)):
        await order(s, 0)


# -- the check -------------------------------------------------------------------------------


def expected_after(world: World, programs: Sequence[Sequence[Op]],
                   disabled: frozenset[int] = frozenset()) -> list[np.ndarray]:  # fmt: skip
    data = [init.copy() for init in world.initial]
    for program in programs:
        reference(program, data, disabled)
    return data


def assert_same(got: list[np.ndarray], want: list[np.ndarray], how: str) -> None:
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        name = {SYM: "symbol", HOST: "host array"}.get(index, f"buffer {index}")
        np.testing.assert_array_equal(g, w, err_msg=f"{how}: {name}")


def assert_idle(exec_: ahg.GraphExec) -> None:
    stats = exec_.statistics()
    assert stats.in_flight == 0, stats
    assert stats.launches == stats.completed, stats
    assert stats.signal_pool.in_use == 0, stats
    assert stats.signal_pool.waiters == 0, stats


Mode = Callable[[World, tuple[Op, ...], random.Random], Any]


async def mode_eager(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    stream = world.device.create_stream()
    await world.reset(stream)
    await run_eager(stream, world, program)
    assert_same(await world.read(stream), expected_after(world, [program]), "eager")
    stream.destroy()


async def launch_in_flight(world: World, exec_: ahg.GraphExec, stream: ahg.Stream, times: int,
                           between: Callable[[int], None] | None = None) -> None:  # fmt: skip
    """Launch ``times`` without waiting, calling ``between(k)`` after launch ``k``; await all."""
    handles = []
    for k in range(times):
        handles.append(await exec_.launch(stream))
        if between is not None:
            between(k)
    for handle in handles:
        await handle


async def mode_replay(world: World, program: tuple[Op, ...], rng: random.Random,
                      flags: int = 0) -> None:  # fmt: skip
    stream = world.device.create_stream()
    built = build(world, program, priorities=rng if flags else None)
    # a race-free graph passes the race check (no false alarm), and the check changes nothing
    options = {"upload_stream": stream} if flags == 2 else {"check_races": not flags}
    exec_ = built.graph.instantiate(flags, **options)
    # once, then several launches in flight (past the 16 signal sets prepared): sequential runs
    for times in (1, rng.choice([3, 20])):
        await world.reset(stream)
        await launch_in_flight(world, exec_, stream, times)
        assert_same(await world.read(stream), expected_after(world, [program] * times),
                    f"graph with flags {flags}, {times} launches")  # fmt: skip
    assert_idle(exec_)
    exec_.destroy()
    built.graph.destroy()
    stream.destroy()


async def mode_clone(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    if any(op.kind == "scratch" for op in program):
        return  # a graph with memory nodes cannot be cloned (NotSupported, as HIP)
    stream = world.device.create_stream()
    built = build(world, program)
    clone = built.graph.clone()
    built.graph.destroy()  # the clone stands alone
    exec_ = clone.instantiate()
    await world.reset(stream)
    await (await exec_.launch(stream))
    assert_same(await world.read(stream), expected_after(world, [program]), "clone")
    assert_idle(exec_)
    exec_.destroy()
    clone.destroy()
    stream.destroy()


async def mode_update(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    """An executable of other constants, updated to ``program``'s, runs ``program``; and one
    updated between launches in flight gives each launch the graph it was enqueued with."""
    if holds(program, {"if", "switch", "while"}):
        return  # another graph's conditional node has another handle: an update refuses it
    stream = world.device.create_stream()
    other = perturb(program, rng)
    a, b = build(world, other), build(world, program)
    exec_ = a.graph.instantiate()
    await world.reset(stream)
    await (await exec_.launch(stream))  # a launch before the update
    assert_same(await world.read(stream), expected_after(world, [other]), "before update")
    exec_.update(b.graph)
    await world.reset(stream)
    await (await exec_.launch(stream))
    assert_same(await world.read(stream), expected_after(world, [program]), "updated")
    await world.reset(stream)
    await launch_in_flight(world, exec_, stream, 2, lambda k: exec_.update(a.graph))
    assert_same(await world.read(stream), expected_after(world, [program, other]),
                "update between launches in flight")  # fmt: skip
    assert_idle(exec_)
    exec_.destroy()
    a.graph.destroy()
    b.graph.destroy()
    stream.destroy()


class GraphSetters:
    """The executable setters' signatures over a graph's own nodes (``hipGraph*SetParams``)."""

    def set_kernel_node_params(self, node: ahg.GraphNode, *args: Any) -> None:
        node.set_kernel_params(*args)

    def set_memset_node_params(self, node: ahg.GraphNode, *args: Any, **kw: Any) -> None:
        node.set_memset_params(*args, **kw)

    def set_host_node_params(self, node: ahg.GraphNode, *args: Any) -> None:
        node.set_host_params(*args)

    def set_memcpy_node_params(self, node: ahg.GraphNode, *args: Any) -> None:
        node.set_memcpy_params(*args)

    def set_memcpy_3d_node_params(self, node: ahg.GraphNode, *args: Any, **kw: Any) -> None:
        node.set_memcpy_3d_params(*args, **kw)

    def set_memcpy_node_to_symbol(self, node: ahg.GraphNode, *args: Any) -> None:
        node.set_memcpy_to_symbol_params(*args)

    def set_memcpy_node_from_symbol(self, node: ahg.GraphNode, *args: Any) -> None:
        node.set_memcpy_from_symbol_params(*args)

    def set_child_graph_node_params(self, node: ahg.GraphNode, child: ahg.Graph) -> None:
        node.set_child_graph(child)


def set_constants(world: World, exec_: ahg.GraphExec | GraphSetters, built: Built,
                  program: tuple[Op, ...]) -> None:  # fmt: skip
    """Give every top-level node ``program``'s constants through the per-node setters of an
    executable, or of the graph (``GraphSetters``)."""
    bufs = world.bufs
    for index, (op, node) in enumerate(zip(program, built.nodes, strict=True)):
        kind = op.kind
        if kind in ("kernel", "akernel"):
            exec_.set_kernel_node_params(node, kernel_of(op), *shape(op), kernel_args(world, op))
        elif kind in ("memset", "memset2d"):
            args, kw = memset_args(world, op)
            exec_.set_memset_node_params(node, *args, **kw)
        elif kind in ("host", "ahost"):
            exec_.set_host_node_params(node, host_of(op), (world.device, bufs[op.dst], op.a[0]))
        elif kind in ("copy", "h2d", "d2h"):
            exec_.set_memcpy_node_params(node, *linear(world, op))
        elif kind == "copy3d":
            dst, src, extent, dpos, spos = pitched(world, op)
            exec_.set_memcpy_3d_node_params(node, dst, src, extent, dst_pos=dpos, src_pos=spos)
        elif kind == "to_sym":
            exec_.set_memcpy_node_to_symbol(node, world.symbol, bufs[op.src], *op.a)
        elif kind == "from_sym":
            exec_.set_memcpy_node_from_symbol(node, bufs[op.dst], world.symbol, *op.a)
        elif kind in ("if", "switch", "while") and op.a[1] == 0:  # the deciding kernel
            decider = built.firsts[index]
            params = decider.get_kernel_params()
            args = (params.args[0], op.a[0], *params.args[2:])
            exec_.set_kernel_node_params(decider, params.kernel, 1, 1, args)
        elif kind == "child" and not holds(op.body[0], {"if", "switch", "while"}):
            child = build(world, op.body[0]).graph
            exec_.set_child_graph_node_params(node, child)
            child.destroy()


async def mode_setters(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    stream = world.device.create_stream()
    versions = [program, perturb(program, rng, False), perturb(program, rng, False)]
    built = build(world, program)
    exec_ = built.graph.instantiate(check_races=True)  # every setter is checked again
    await world.reset(stream)

    def next_version(k: int) -> None:
        set_constants(world, exec_, built, versions[(k + 1) % 3])

    await launch_in_flight(world, exec_, stream, 4, next_version)
    want = expected_after(world, [versions[0], versions[1], versions[2], versions[0]])
    assert_same(await world.read(stream), want, "setters between launches in flight")
    assert_idle(exec_)
    exec_.destroy()
    built.graph.destroy()
    stream.destroy()


async def mode_twins(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    """Two executables of one graph (one given other constants, the first changed after its
    first launch), launched in turns without waiting, each run its own constants."""
    if holds(program, {"scratch"}):
        return  # a graph with memory nodes has one executable at a time (NotSupported)
    stream = world.device.create_stream()
    p, q, r = program, perturb(program, rng, False), perturb(program, rng, False)
    built = build(world, p)
    clone = built.graph.clone()  # the second from a clone, its nodes found through the clone
    first, second = built.graph.instantiate(), clone.instantiate()
    in_clone = Built(clone, [clone.find_in_clone(n) for n in built.nodes],
                     [clone.find_in_clone(n) for n in built.firsts])  # fmt: skip
    set_constants(world, second, in_clone, q)
    await world.reset(stream)
    handles = [await first.launch(stream)]
    set_constants(world, first, built, r)
    handles += [await second.launch(stream), await first.launch(stream)]
    handles += [await second.launch(stream)]
    for handle in handles:
        await handle
    assert_same(await world.read(stream), expected_after(world, [p, q, r, q]), "twins")
    for exec_ in (first, second):
        assert_idle(exec_)
        exec_.destroy()
    built.graph.destroy()
    clone.destroy()
    stream.destroy()


async def mode_edit_after_instantiate(world: World, program: tuple[Op, ...], rng: random.Random,
                                      ) -> None:  # fmt: skip
    """Editing a graph's nodes after instantiate leaves the executable as it was; an update
    from the edited graph, or a new executable, runs the edits."""
    stream = world.device.create_stream()
    edited = perturb(program, rng, False)
    built = build(world, program)
    exec_ = built.graph.instantiate()
    set_constants(world, GraphSetters(), built, edited)
    await world.reset(stream)
    await (await exec_.launch(stream))
    assert_same(await world.read(stream), expected_after(world, [program]), "graph edited")
    if not holds(program, {"scratch"}):  # one executable at a time with memory nodes
        fresh = built.graph.instantiate()
        await world.reset(stream)
        await (await fresh.launch(stream))
        assert_same(await world.read(stream), expected_after(world, [edited]), "edited, anew")
        assert_idle(fresh)
        fresh.destroy()
    await world.reset(stream)
    await launch_in_flight(world, exec_, stream, 2, lambda k: exec_.update(built.graph))
    assert_same(await world.read(stream), expected_after(world, [program, edited]),
                "updated from the edited graph between launches")  # fmt: skip
    assert_idle(exec_)
    exec_.destroy()
    built.graph.destroy()
    stream.destroy()


async def mode_side_by_side(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    """Another program on buffers of its own runs at the same time on another stream, as a
    graph or eagerly (allocating with ``malloc_async`` while the graph allocates too): both
    give their own results, launch after launch."""
    other_world = World.make(world.device, rng.randrange(1 << 16), symbol=1)
    other = random_program(rng, rng.randint(1, 8))
    s1, s2 = world.device.create_stream(), world.device.create_stream()
    mine, theirs = build(world, program), build(other_world, other)
    exec1, exec2 = mine.graph.instantiate(), theirs.graph.instantiate()
    await world.reset(s1)
    await other_world.reset(s2)
    handles = []
    for _ in range(3):
        handles += [await exec1.launch(s1), await exec2.launch(s2)]
    for handle in handles:
        await handle
    assert_same(await world.read(s1), expected_after(world, [program] * 3), "side by side")
    assert_same(await other_world.read(s2), expected_after(other_world, [other] * 3), "the other")
    await world.reset(s1)
    await other_world.reset(s2)
    await s2.synchronize()
    handles = [await exec1.launch(s1), await exec1.launch(s1)]
    await run_eager(s2, other_world, other)  # reads back conditions: may wait for itself
    for handle in handles:
        await handle
    assert_same(await world.read(s1), expected_after(world, [program] * 2), "beside eager")
    assert_same(await other_world.read(s2), expected_after(other_world, [other]), "eager beside")
    for exec_ in (exec1, exec2):
        assert_idle(exec_)
        exec_.destroy()
    mine.graph.destroy()
    theirs.graph.destroy()
    other_world.free()
    s1.destroy()
    s2.destroy()


async def mode_disabled(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    stream = world.device.create_stream()
    built = build(world, program)
    exec_ = built.graph.instantiate()
    candidates = [i for i, op in enumerate(program) if op.kind in CAN_DISABLE]
    off = frozenset(rng.sample(candidates, min(len(candidates), rng.randint(1, 3))))
    for i in off:
        exec_.set_node_enabled(built.nodes[i], False)
    await world.reset(stream)
    await (await exec_.launch(stream))
    assert_same(await world.read(stream), expected_after(world, [program], off), "disabled")
    for i in off:  # enabled again, the next launch runs them
        exec_.set_node_enabled(built.nodes[i], True)
    await world.reset(stream)
    await (await exec_.launch(stream))
    assert_same(await world.read(stream), expected_after(world, [program]), "re-enabled")
    # toggled between launches in flight: each launch runs the nodes enabled when enqueued
    patterns = [off, frozenset(), frozenset(rng.sample(candidates, len(candidates) // 2)), off]

    def switch_to(k: int) -> None:
        for i in candidates:
            exec_.set_node_enabled(built.nodes[i], i not in patterns[(k + 1) % 4])

    for i in off:
        exec_.set_node_enabled(built.nodes[i], False)
    await world.reset(stream)
    await launch_in_flight(world, exec_, stream, 4, switch_to)
    data = [init.copy() for init in world.initial]
    for pattern in patterns:
        reference(program, data, pattern)
    assert_same(await world.read(stream), data, "enabled state changed between launches")
    assert_idle(exec_)
    exec_.destroy()
    built.graph.destroy()
    stream.destroy()


async def mode_capture(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    if not flat(program):
        return
    streams = [world.device.create_stream() for _ in range(3)]
    events: list[ahg.Event] = []
    graph = await capture(world, streams, program, rng.random(), events)
    exec_ = graph.instantiate()
    await world.reset(streams[1])
    await launch_in_flight(world, exec_, streams[1], 2)
    assert_same(await world.read(streams[1]), expected_after(world, [program] * 2), "captured")
    assert_idle(exec_)
    exec_.destroy()
    graph.destroy()
    for event in events:
        event.destroy()
    for stream in streams:
        stream.destroy()


async def capture(world: World, streams: list[ahg.Stream], program: Sequence[Op], seed: float,
                  events: list[ahg.Event]) -> ahg.Graph:  # fmt: skip
    """``program`` captured from ``streams``, each op on the stream ``seed`` draws for it."""
    streams[0].begin_capture()
    await play_on_streams(world, streams, program, random.Random(seed), events)
    return streams[0].end_capture()


async def mode_recapture_update(world: World, program: tuple[Op, ...], rng: random.Random,
                                ) -> None:  # fmt: skip
    """Capture other constants and instantiate; capture ``program`` the same way and update
    the executable to it (its allocations move to the executable's): ``program`` runs."""
    if not flat(program):
        return
    streams = [world.device.create_stream() for _ in range(3)]
    events: list[ahg.Event] = []
    other, seed = perturb(program, rng), rng.random()
    graph_a = await capture(world, streams, other, seed, events)
    graph_b = await capture(world, streams, program, seed, events)
    exec_ = graph_a.instantiate()
    await world.reset(streams[0])
    await (await exec_.launch(streams[0]))
    assert_same(await world.read(streams[0]), expected_after(world, [other]), "first capture")
    exec_.update(graph_b)
    await world.reset(streams[0])
    await launch_in_flight(world, exec_, streams[0], 2)
    assert_same(await world.read(streams[0]), expected_after(world, [program] * 2),
                "updated to a recapture")  # fmt: skip
    assert_idle(exec_)
    exec_.destroy()
    graph_a.destroy()
    graph_b.destroy()
    for event in events:
        event.destroy()
    for stream in streams:
        stream.destroy()


def between_events(world: World, program: Sequence[Op], wait: ahg.Event, record: ahg.Event,
                   ) -> Built:  # fmt: skip
    """``program`` as a graph that waits for ``wait`` first and records ``record`` last."""
    built = build(world, program)
    graph = built.graph
    last = graph.nodes()
    waiting = graph.add_event_wait_node(wait)
    for node in built.firsts:
        graph.add_dependencies([waiting], [node])
    graph.add_event_record_node(record, deps=last or [waiting])
    return built


async def mode_capture_into(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    """A graph built by hand up to a cut, the rest captured into it from three streams after
    the hand-built nodes (``begin_capture_to_graph``)."""
    cut = rng.randint(0, len(program))
    first, second = program[:cut], program[cut:]
    if not flat(second):
        return
    streams = [world.device.create_stream() for _ in range(3)]
    events: list[ahg.Event] = []
    built = build(world, first)
    sinks = [node for node in built.graph.nodes() if not node.dependents()]
    streams[0].begin_capture_to_graph(built.graph, sinks)
    await play_on_streams(world, streams, second, random.Random(rng.random()), events)
    assert streams[0].end_capture() is built.graph
    exec_ = built.graph.instantiate()
    await world.reset(streams[2])
    await launch_in_flight(world, exec_, streams[2], 2)
    assert_same(await world.read(streams[2]), expected_after(world, [program] * 2), "into")
    assert_idle(exec_)
    exec_.destroy()
    built.graph.destroy()
    for event in events:
        event.destroy()
    for stream in streams:
        stream.destroy()


async def mode_capture_bodies(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    """Conditional bodies filled by capturing a stream into them (``begin_capture_to_graph``
    on a body graph), the rest built by hand."""
    later: Later = []
    built = build(world, program, later=later)
    stream = world.device.create_stream()
    for body, ops, tail in later:
        stream.begin_capture_to_graph(body)
        await run_eager(stream, world, ops)
        assert stream.end_capture() is body
        if tail is not None:
            tail([node for node in body.nodes() if not node.dependents()])
    exec_ = built.graph.instantiate()
    await world.reset(stream)
    await launch_in_flight(world, exec_, stream, 2)
    assert_same(await world.read(stream), expected_after(world, [program] * 2), "bodies")
    assert_idle(exec_)
    exec_.destroy()
    built.graph.destroy()
    stream.destroy()


async def mode_split_by_events(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    """The first half in one graph, the second in another graph (or on a stream), ordered only
    by an event the first records and the second waits for, on two streams; and the two
    graphs launched in turns without waiting, each waiting for the other's last record."""
    cut = rng.randint(0, len(program))
    first, second = program[:cut], program[cut:]
    s1, s2 = world.device.create_stream(), world.device.create_stream()
    event, back = world.device.create_event(), world.device.create_event()
    one = between_events(world, first, back, event)  # ``back`` not recorded yet: no wait
    two = between_events(world, second, event, back)
    exec1, exec2 = one.graph.instantiate(), two.graph.instantiate()
    await world.reset(s1)
    await s1.synchronize()
    done = await exec1.launch(s1)
    await (await exec2.launch(s2))
    await done
    assert_same(await world.read(s2), expected_after(world, [program]), "graph → graph event")
    await world.reset(s1)
    await s1.synchronize()
    done = await exec1.launch(s1)
    await s2.wait_event(event)
    await run_eager(s2, world, second)
    await done
    assert_same(await world.read(s2), expected_after(world, [program]), "graph → stream event")
    await world.reset(s1)
    await s1.synchronize()
    await run_eager(s1, world, first)
    await s1.record_event(event)
    await (await exec2.launch(s2))
    assert_same(await world.read(s2), expected_after(world, [program]), "stream → graph event")
    await world.reset(s1)
    await s1.synchronize()
    handles = []
    for _ in range(3):  # each wait node waits for the record enqueued last before its launch
        handles.append(await exec1.launch(s1))
        handles.append(await exec2.launch(s2))
    for handle in handles:
        await handle
    assert_same(await world.read(s2), expected_after(world, [program] * 3), "ping-pong")
    for exec_ in (exec1, exec2):
        assert_idle(exec_)
        exec_.destroy()
    one.graph.destroy()
    two.graph.destroy()
    event.destroy()
    back.destroy()
    s1.destroy()
    s2.destroy()


async def mode_other_device(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    """Launched on a stream of the other device, the work still runs on its own device."""
    home = world.device.create_stream()
    away = ahg.get_device(1 - world.device.ordinal).create_stream()
    built = build(world, program)
    exec_ = built.graph.instantiate()
    await world.reset(home)
    await home.synchronize()
    await launch_in_flight(world, exec_, away, 2)
    await away.synchronize()
    assert_same(await world.read(home), expected_after(world, [program] * 2), "other device")
    assert_idle(exec_)
    exec_.destroy()
    built.graph.destroy()
    home.destroy()
    away.destroy()


async def mode_flags(world: World, program: tuple[Op, ...], rng: random.Random) -> None:
    for flags in (
        ahg.InstantiateFlags.USE_NODE_PRIORITY,
        ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH,
        ahg.InstantiateFlags.UPLOAD,
    ):
        await mode_replay(world, program, rng, int(flags))


MODES: dict[str, Mode] = {
    "eager": mode_eager,
    "replay": mode_replay,
    "clone": mode_clone,
    "update": mode_update,
    "setters": mode_setters,
    "disabled": mode_disabled,
    "twins": mode_twins,
    "side by side": mode_side_by_side,
    "edit after instantiate": mode_edit_after_instantiate,
    "capture": mode_capture,
    "recapture and update": mode_recapture_update,
    "capture into a graph": mode_capture_into,
    "capture into bodies": mode_capture_bodies,
    "events": mode_split_by_events,
    "other device": mode_other_device,
    "flags": mode_flags,
}


async def check_program(program: tuple[Op, ...], seed: int, modes: Sequence[str] = tuple(MODES),
                        ordinal: int = 0) -> None:  # fmt: skip
    """Run ``program`` every way in ``modes`` on device ``ordinal`` (made the current device);
    each must match numpy; no leaks."""
    ahg.set_device(ordinal)
    device = ahg.get_device(ordinal)

    def free_bytes() -> int:  # the symbol's storage is made on first use, and kept
        stats = device.memory.statistics()
        return device.memory_info()[0] + stats.graph_pool_cached + stats.static_bytes

    before = free_bytes()
    world = World.make(device, seed)
    try:
        for name in modes:
            await MODES[name](world, program, random.Random(seed * 31 + len(name)))
    finally:
        world.free()
    await device.synchronize()
    device.graph_mem_trim()
    assert free_bytes() == before


# -- tests -----------------------------------------------------------------------------------


def fresh_devices(queues: int = 4, ring: int = 16384) -> None:
    """Two fresh devices with ``queues`` hardware queues of ``ring`` packets each (a small ring
    makes enqueues wait for room while launches are in flight)."""
    properties = ahg.DeviceProperties(hardware_queues=queues, hardware_queue_capacity=ring)
    ahg.configure_devices(2, properties)


SEEDS = range(24)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_programs_agree_in_every_mode(seed: int) -> None:
    rng = random.Random(seed)
    fresh_devices(rng.choice([1, 2, 4]), rng.choice([16384, 16384, 8, 3]))
    program = random_program(rng, rng.randint(1, 7))
    ahg.run(check_program(program, seed, ordinal=seed % 2))


@pytest.mark.parametrize("seed", range(3))
def test_random_programs_agree_on_uvloop(seed: int) -> None:
    fresh_devices()
    rng = random.Random(1000 + seed)
    program = random_program(rng, rng.randint(2, 7))
    ahg.run(check_program(program, seed), use_uvloop=True)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 400))
def test_random_programs_agree_in_every_mode_soak(seed: int) -> None:
    rng = random.Random(seed)
    fresh_devices(rng.choice([1, 2, 4]), rng.choice([16384, 16384, 8, 3]))
    program = random_program(rng, rng.randint(1, 12))
    ahg.run(check_program(program, seed, ordinal=seed % 2))


EVERY_KIND = (
    Op("kernel", 0, 1, (2, 5, 1, 1)),
    Op("akernel", 1, 0, (-1, 3, 2, 0)),
    Op("host", 2, a=(4,)),
    Op("ahost", 3, a=(7,)),
    Op("memset", 4, a=(0xBEEF, 2, 20, 6)),
    Op("memset2d", 5, a=(0x01020304, 4, 3, 5, 16)),
    Op("copy", 6, 0, (40, 8, 16)),
    Op("copy3d", 7, 1, (6, 2, 2, 16, 3, 1, 0, 0, 24, 2, 2, 0, 1)),
    Op("to_sym", 0, 2, (40, 16)),
    Op("from_sym", 3, 0, (16, 8)),
    Op("h2d", 4, a=(24, 0, 100)),
    Op("d2h", 0, 5, (32, 64, 0)),
    Op("scratch", 6, 7, (3, -2, 1, 1)),
    Op("child", body=((Op("kernel", 1, 2, (1, 1, 0, 0)),
                       Op("child", body=((Op("copy", 2, 1, (8, 0, 0)),),))),)),
    Op("if", src=0, a=(0, 0), body=((Op("kernel", 3, 4, (2, 2, 3, 0)),),
                                    (Op("memset", 3, a=(9, 1, 8, 0)),))),
    Op("switch", src=1, a=(3, 1), body=((), (), (), (Op("copy", 5, 6, (16, 0, 0)),))),
    Op("while", src=2, a=(1, 0), body=((Op("kernel", 7, 7, (1, 1, 4, 0)),),)),
)  # fmt: skip


def test_a_program_of_every_kind_agrees_in_every_mode() -> None:
    fresh_devices(2)
    ahg.run(check_program(EVERY_KIND, 7))


def test_the_check_notices_a_wrong_result() -> None:
    """The harness can fail: a copy whose reference reads one byte further is caught."""
    fresh_devices()
    program = (Op("copy", 0, 1, (8, 0, 0)),)
    wrong = (Op("copy", 0, 1, (8, 0, 1)),)
    world_seed = 3

    async def main() -> None:
        device = ahg.get_device(0)
        world = World.make(device, world_seed)
        stream = device.create_stream()
        await world.reset(stream)
        await run_eager(stream, world, program)
        with pytest.raises(AssertionError, match="buffer 0"):
            assert_same(await world.read(stream), expected_after(world, [wrong]), "eager")
        stream.destroy()
        world.free()

    ahg.run(main())
