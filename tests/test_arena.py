"""The kernel-argument arena: bump allocation, chunks, reuse, flush and close."""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from ahipgraph.exec.arena import ARG_ALIGNMENT, JOIN_RUN, KernelArgArena


def test_bump_allocation_is_aligned_and_adds_chunks_when_full(device: ahg.Device) -> None:
    arena = KernelArgArena(device, 64)
    slots = [arena.allocate(24) for _ in range(3)]
    assert [(s.chunk, s.offset) for s in slots] == [(0, 0), (0, 32), (1, 0)]
    assert all(s.offset % ARG_ALIGNMENT == 0 for s in slots)
    stats = arena.statistics()
    assert (stats.chunks, stats.live_slots, stats.allocations) == (2, 3, 3)
    assert device.memory.bytes_in_use == 2 * 64  # chunks are device memory
    arena.close()
    assert device.memory.bytes_in_use == 0
    arena.close()  # idempotent


def test_freed_slots_are_reused_by_size(device: ahg.Device) -> None:
    arena = KernelArgArena(device, 256)
    first = arena.allocate(16)
    arena.free(first)
    assert arena.allocate(16) is first
    other = arena.allocate(32)
    assert other is not first
    stats = arena.statistics()
    assert (stats.reuses, stats.allocations, stats.live_slots, stats.free_slots) == (1, 2, 2, 0)
    arena.close()


def test_written_bytes_land_in_device_memory(device: ahg.Device) -> None:
    arena = KernelArgArena(device, 128)
    slot = arena.allocate(8)
    arena.write(slot, b"\x01\x02\x03\x04\x05\x06\x07\x08")
    assert bytes(slot.buffer[slot.offset : slot.offset + 8]) == b"\x01\x02\x03\x04\x05\x06\x07\x08"
    with pytest.raises(ahg.InvalidValue):
        arena.write(slot, b"x" * 9)
    arena.close()


def test_strict_mode_tracks_unflushed_writes(device: ahg.Device) -> None:
    arena = KernelArgArena(device, 128, strict=True)
    slot = arena.allocate(8)
    arena.write(slot, bytes(8))
    assert not arena.is_flushed(slot)
    assert arena.statistics().unflushed == 1
    arena.flush()
    assert arena.is_flushed(slot)
    arena.close()


def test_oversized_slot_and_closed_arena_are_rejected(device: ahg.Device) -> None:
    arena = KernelArgArena(device, 64)
    with pytest.raises(ahg.InvalidValue):
        arena.allocate(65)
    arena.close()
    with pytest.raises(ahg.InvalidValue):
        arena.allocate(8)


def test_a_full_device_reports_out_of_memory() -> None:
    ahg.configure_devices(1, ahg.DeviceProperties(memory_bytes=100))
    arena = KernelArgArena(ahg.get_device(0), 64)
    arena.allocate(64)
    with pytest.raises(ahg.OutOfMemory):
        arena.allocate(8)
    arena.close()


@pytest.mark.parametrize("extra", [-JOIN_RUN - 1, -1, 0, 1, JOIN_RUN + 7])
def test_a_long_run_of_one_shape_lands_slot_by_slot(device: ahg.Device, extra: int) -> None:
    """A run longer than one join (written run by run) lands exactly where a single join puts
    it: each item in its slot, and the padding between two items zero over stale bytes."""
    count = 2 * JOIN_RUN + extra
    size = 12  # four bytes of padding after each item
    step = -(-size // ARG_ALIGNMENT) * ARG_ALIGNMENT
    arena = KernelArgArena(device, step * (count + 2))
    first = arena.place(b"", 1)  # opens the chunk: the run is one span after it
    buffer = first.buffer
    buffer[:] = b"\xee" * len(buffer)  # what an earlier owner of the memory left
    datas = [i.to_bytes(size, "little") for i in range(count)]
    ((chunk, span_buffer, offsets, sizes),) = arena.place_spans(datas, [size] * count)
    assert (chunk, span_buffer) == (first.chunk, buffer)
    assert list(offsets) == [step * (i + 1) for i in range(count)]
    assert list(sizes) == [size] * count
    end = offsets[-1] + size
    assert bytes(buffer[offsets[0] : end]) == bytes(step - size).join(datas)
    assert bytes(buffer[end : end + 1]) == b"\xee"  # nothing written past the last item
    assert arena.statistics().live_slots == count + 1
    arena.close()
