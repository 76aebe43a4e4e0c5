"""The emulator's SMs are worker threads: a launch's blocks run on up to sm_count of
them at once (%smid names the worker), an SM cap leaves it fewer, and running
blocks side by side changes nothing a job can see: printf output in block order,
the failure of the lowest failing block, exact results."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from e2e_helpers import build_device_code

from tally.backends.base import ModuleSource
from tally.backends.emulator import EmulatorBackend
from tally.protocol.errors import CUDA_ERROR_ILLEGAL_ADDRESS, DeviceError

SM_COUNT = 8
THREADS = 128


@pytest.fixture(scope="module")
def device(nvcc):
    backend = EmulatorBackend(printf_to_stdout=False, launch_timeout_s=120, sm_count=SM_COUNT)
    module = backend.module_load(ModuleSource(b"", ptx=build_device_code(nvcc, "sm_share.cu", "ptx").read_text()))
    yield backend, module
    backend.close()


def measure(backend, module, blocks: int, sm_cap: int | None, spin_us: int = 1000):
    """(distinct %smid, most blocks at once, what sm_usage recorded, results right)."""
    fn = backend.module_function(module, "measure")
    block_sm, out, counters = (backend.mem_alloc(n) for n in (4 * blocks, 4 * blocks * THREADS, 8))
    stream = backend.stream_create()
    backend.memset_async(counters, 0, 4, 2, stream)
    params = struct.pack("<QQQQiiQ", block_sm, counters, counters + 4, out, blocks * THREADS, 0, spin_us * 1000)
    backend.launch(fn, (blocks, 1, 1), (THREADS, 1, 1), 0, stream, params, sm_cap=sm_cap)
    sms, results, peak = bytearray(4 * blocks), bytearray(4 * blocks * THREADS), bytearray(8)
    backend.memcpy_dtoh_async(memoryview(sms), block_sm, stream)
    backend.memcpy_dtoh_async(memoryview(results), out, stream)
    backend.memcpy_dtoh_async(memoryview(peak), counters, stream)
    backend.stream_synchronize(stream)
    usage = list(backend.sm_usage[stream])
    backend.stream_destroy(stream)
    smids = set(np.frombuffer(sms, np.int32).tolist())
    right = np.array_equal(np.frombuffer(results, np.int32), 2 * np.arange(blocks * THREADS) + 1)
    running, most = struct.unpack("<II", peak)
    assert running == 0
    return smids, most, usage, right


@pytest.mark.parametrize("cap", [1, 2, 6])
def test_a_capped_launch_runs_on_at_most_its_sms(device, cap):
    smids, most, (sms_used, concurrent), right = measure(*device, blocks=32, sm_cap=cap)
    assert right
    assert smids <= set(range(cap)) and len(smids) <= cap
    assert most <= cap and sms_used <= cap and concurrent <= cap


def test_without_a_cap_blocks_spread_over_the_devices_workers(device):
    # What the capped runs are measured against: the same kernel uses more than 2 of
    # the 8 workers, blocks overlapping in time (each spins 1 ms; 64 of them).
    smids, most, (sms_used, concurrent), right = measure(*device, blocks=64, sm_cap=None)
    assert right
    assert smids <= set(range(SM_COUNT)) and len(smids) >= 3 and sms_used == len(smids)
    assert 3 <= most <= SM_COUNT and concurrent == most


def test_a_cap_larger_than_the_device_is_refused(device):
    backend, module = device
    stream = backend.stream_create()
    with pytest.raises(DeviceError, match="SM cap 9 is outside 1..8"):
        backend.launch(backend.module_function(module, "announce"), (1, 1, 1), (32, 1, 1), 0, stream,
                       struct.pack("<Q", 0), sm_cap=9)
    assert backend.sm_grant(3) == 3 and backend.sm_grant(50) == SM_COUNT


def test_printf_reads_in_block_order_whatever_order_blocks_end_in(device):
    backend, module = device
    stream = backend.stream_create()
    # block 0 spins longest: on 8 workers the blocks end in reverse order
    backend.launch(backend.module_function(module, "announce"), (16, 1, 1), (32, 1, 1), 0, stream,
                   struct.pack("<Q", 200_000))
    backend.stream_synchronize(stream)
    assert backend.take_printf(stream) == "".join(f"block {b}\n" for b in range(16))
    backend.stream_destroy(stream)


def test_the_lowest_failing_block_is_the_one_reported(device):
    """Block 20 faults at once, block 5 after 20 ms: one worker running blocks in
    order would have met block 5 first, and so must eight."""
    backend, module = device
    for _ in range(3):
        stream = backend.stream_create()
        out = backend.mem_alloc(4 * 32)
        backend.launch(backend.module_function(module, "fault_at"), (32, 1, 1), (32, 1, 1), 0, stream,
                       struct.pack("<QQiiQ", out, 0x10, 5, 20, 20_000_000))
        with pytest.raises(DeviceError) as failed:
            backend.stream_synchronize(stream)
        assert failed.value.code == CUDA_ERROR_ILLEGAL_ADDRESS
        assert "block (5,0,0)" in failed.value.message and "(20,0,0)" not in failed.value.message
        backend.stream_destroy(stream)
        backend.mem_free(out)
