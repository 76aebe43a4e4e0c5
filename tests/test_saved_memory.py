"""Where a suspended job's bytes wait (tally/server/saved_log.py, saved_memory.py):
regions of any size round-trip exactly through shared slabs, compressible slabs
are kept compressed and incompressible ones as they are, the host-memory limit
and the host's reserve are kept (a chunk beyond them spills to disk, or the save
is refused and gives everything back), and a resume's buffers are kept for the
next suspension, then trimmed."""
from __future__ import annotations

import os

import pytest

from tally.server.saved_log import PackedSlab, RawSlab, SavedLog, SpilledSlab
from tally.server.saved_memory import CHUNK_BYTES, HostMemoryFull, SavedMemoryPolicy, SavedMemoryStore

MIB = 1 << 20
PLENTY = 1 << 40


class Device:
    """Regions of bytes, copied synchronously (the log only needs the calls' shape)."""

    def __init__(self, sizes: list[int], zeros: bool = False):
        self.regions = [bytearray(n) if zeros else bytearray(os.urandom(n)) for n in sizes]
        self.syncs = 0

    def sync(self) -> None:
        self.syncs += 1

    def copy_out(self, index: int):
        def copy(view: memoryview, at: int) -> None:
            view[:] = self.regions[index][at:at + len(view)]
        return copy

    def copy_in(self, target: list[bytearray], index: int):
        def copy(at: int, view: memoryview) -> None:
            target[index][at:at + len(view)] = view
        return copy


def store(limit=None, spill=None, keep=0, available=PLENTY) -> SavedMemoryStore:
    return SavedMemoryStore(SavedMemoryPolicy(limit, spill, keep), available=lambda: available)


def save(log: SavedLog, device: Device) -> None:
    writer = log.writer(device.sync, sum(map(len, device.regions)))
    try:
        for i, region in enumerate(device.regions):
            writer.append(len(region), device.copy_out(i))
        writer.finish()
    except BaseException:
        writer.abort()
        raise


def read_back(log: SavedLog, device: Device, skip: int | None = None) -> list[bytearray]:
    out = [bytearray(len(r)) for r in device.regions]
    reader = log.reader(device.sync)
    for i, region in enumerate(device.regions):
        if i == skip:
            reader.skip(len(region))
        else:
            reader.read(len(region), device.copy_in(out, i))
    reader.finish()
    return out


SIZES = [100, CHUNK_BYTES, 3 * MIB + 7, 1, 2 * CHUNK_BYTES + 4096, 256]


def test_regions_of_any_size_come_back_exactly_and_share_full_slabs():
    device, s = Device(SIZES), store()
    log = SavedLog(s)
    save(log, device)
    assert log.nbytes == sum(SIZES)
    assert len(log.slabs) == -(-sum(SIZES) // CHUNK_BYTES)          # no slab per region: one stream
    *full, last = log.slabs
    assert all(isinstance(slab, RawSlab) for slab in full)            # random bytes: not compressed
    # the last slab is under half full: its bytes are copied out and its buffer goes back
    assert isinstance(last, PackedSlab) and not last.compressed and last.n == sum(SIZES) % CHUNK_BYTES
    assert read_back(log, device) == device.regions
    assert s.host_bytes == len(full) * CHUNK_BYTES + last.n
    log.release()
    assert s.host_bytes == 0 and s.kept_bytes == 0


def test_a_small_job_holds_its_bytes_not_a_buffer():
    device, s = Device([256 << 10, 100]), store()
    log = SavedLog(s)
    save(log, device)
    assert s.host_bytes == log.host_bytes == (256 << 10) + 100 and s.buffer_bytes == 0
    assert read_back(log, device) == device.regions
    log.release()
    assert s.host_bytes == 0


def test_a_skipped_region_leaves_the_others_in_place():
    device = Device(SIZES)
    log = SavedLog(store())
    save(log, device)
    got = read_back(log, device, skip=2)
    assert got[2] == bytearray(len(device.regions[2]))
    assert [g for i, g in enumerate(got) if i != 2] == [r for i, r in enumerate(device.regions) if i != 2]


def test_compressible_slabs_are_kept_compressed_and_their_buffers_reused():
    device, s = Device([4 * CHUNK_BYTES], zeros=True), store()
    log = SavedLog(s)
    save(log, device)
    assert all(isinstance(slab, PackedSlab) for slab in log.slabs)
    assert s.packed_bytes < 4 * CHUNK_BYTES // 100      # zeros: ~34 KiB per 8 MiB slab
    assert s.buffer_bytes == 0                 # the buffers went back (keep is 0)
    assert read_back(log, device) == device.regions
    log.release()
    assert s.host_bytes == 0


def test_over_the_limit_without_a_spill_dir_the_save_is_refused_and_gives_everything_back():
    s = store(limit=2 * CHUNK_BYTES)
    log = SavedLog(s)
    with pytest.raises(HostMemoryFull, match="--suspend-host-limit.*--suspend-spill-dir"):
        save(log, Device([5 * CHUNK_BYTES]))
    assert s.host_bytes == 0 and log.slabs == [] and s.spilled_bytes == 0


def test_the_hosts_reserve_is_kept():
    s = store(available=3 << 30)               # 3 GiB available: 1 GiB above the 2 GiB reserve
    assert s.take_buffer() is not None
    s = store(available=(2 << 30) + CHUNK_BYTES // 2)
    assert s.take_buffer() is None
    assert "leaves 2.00 GiB" in s.why_no_room(CHUNK_BYTES)


def test_beyond_the_limit_chunks_spill_to_disk_and_come_back(tmp_path):
    sizes = [3 * CHUNK_BYTES + 5, 2 * CHUNK_BYTES]
    device, s = Device(sizes), store(limit=2 * CHUNK_BYTES, spill=tmp_path)
    log = SavedLog(s)
    save(log, device)
    kinds = [type(slab) for slab in log.slabs]
    assert kinds.count(RawSlab) == 2 and kinds.count(SpilledSlab) == len(kinds) - 2
    assert s.host_bytes <= 2 * CHUNK_BYTES
    assert s.spilled_bytes == log.spilled_bytes > 2 * CHUNK_BYTES
    assert list(tmp_path.iterdir()) == []      # the spill file is unlinked
    assert read_back(log, device) == device.regions
    log.release()
    assert s.host_bytes == 0 and s.spilled_bytes == 0


def test_a_resumes_buffers_are_kept_for_the_next_suspension_then_trimmed():
    s = store(keep=3 * CHUNK_BYTES)
    log = SavedLog(s)
    device = Device([5 * CHUNK_BYTES])
    save(log, device)
    log.release()
    assert s.kept_bytes == 3 * CHUNK_BYTES and s.buffer_bytes == 3 * CHUNK_BYTES
    assert s.to_json()["saved_kept_bytes"] == 3 * CHUNK_BYTES and s.to_json()["saved_host_bytes"] == 0
    again = SavedLog(s)
    save(again, device)
    assert s.kept_bytes == 0 and s.buffer_bytes == 5 * CHUNK_BYTES     # three kept ones reused
    again.release()
    s.trim()
    assert s.kept_bytes == 0 and s.buffer_bytes == 0


def test_kept_buffers_go_once_idle_for_keep_seconds(monkeypatch):
    import time

    from tally.server import saved_memory
    monkeypatch.setattr(saved_memory, "KEEP_SECONDS", 0.3)
    s = store(keep=2 * CHUNK_BYTES)
    s.give_buffer(s.take_buffer())
    time.sleep(0.2)
    s.give_buffer(s.take_buffer())                 # the one kept, back again: idle from now on
    time.sleep(0.2)
    assert s.kept_bytes == CHUNK_BYTES             # 0.4 s after the first, 0.2 s after the last
    deadline = time.monotonic() + 5
    while s.kept_bytes and time.monotonic() < deadline:
        time.sleep(0.05)
    assert s.kept_bytes == 0 and s.buffer_bytes == 0
