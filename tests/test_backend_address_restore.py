"""The backends' AddressRestore capability (tally/backends/base.py), which
`tally-server suspend` needs: device memory given back and restored at the same
addresses (allocations, a module's globals), physical memory read and written
whether mapped or not, and refusals when the addresses are taken."""
from __future__ import annotations

import pytest

from tally.backends.base import ModuleSource
from tally.backends.cuda import CudaBackend
from tally.backends.emulator import EmulatorBackend
from tally.backends.null import NullBackend
from tally.backends.sim import SimBackend
from tally.protocol.errors import CUDA_ERROR_ALREADY_MAPPED, CUDA_ERROR_OUT_OF_MEMORY, DeviceError

MIB = 1 << 20
GRANULARITY = 2 << 20
PTX = """
.version 8.0
.target sm_90
.address_size 64
.global .align 4 .u32 counter[64] = {7, 8, 9};
.visible .entry touch() { ret; }
"""


@pytest.fixture
def emulator():
    backend = EmulatorBackend(total_memory=64 * MIB, printf_to_stdout=False)
    yield backend
    backend.close()


def test_only_backends_that_can_say_so():
    assert EmulatorBackend.traits.restores_at_address and NullBackend.traits.restores_at_address
    assert EmulatorBackend.traits.migrates_jobs and NullBackend.traits.migrates_jobs
    # the cuda backend restores at addresses only when made restorable (tally-server --suspendable)
    assert not CudaBackend.traits.restores_at_address and not SimBackend.traits.restores_at_address
    assert not CudaBackend.traits.migrates_jobs and not SimBackend.traits.migrates_jobs


def read(backend, ptr: int, nbytes: int) -> bytes:
    out = bytearray(nbytes)
    stream = backend.stream_create()
    backend.memcpy_dtoh_async(memoryview(out), ptr, stream)
    backend.stream_synchronize(stream)
    backend.stream_destroy(stream)
    return bytes(out)


def test_an_allocation_comes_back_at_its_address(emulator):
    ptr = emulator.mem_alloc(4 * MIB)
    free_with = emulator.mem_info()[0]
    emulator.mem_free(ptr)
    assert emulator.mem_info()[0] == free_with + 4 * MIB
    other = emulator.mem_alloc(MIB)            # next fit: not where the freed one was
    assert other != ptr
    emulator.mem_alloc_at(ptr, 4 * MIB)
    assert emulator.mem_info()[0] == free_with - MIB
    assert read(emulator, ptr + 4 * MIB - 8, 8) == bytes(8)      # usable, zeroed, to its last byte
    with pytest.raises(DeviceError) as taken:
        emulator.mem_alloc_at(ptr + MIB, MIB)
    assert taken.value.code == CUDA_ERROR_ALREADY_MAPPED
    with pytest.raises(DeviceError) as taken:
        emulator.mem_alloc_at(other - 512, 256)                  # its guard bytes would touch `other`
    assert taken.value.code == CUDA_ERROR_ALREADY_MAPPED
    emulator.mem_free(ptr)
    with pytest.raises(DeviceError) as full:
        emulator.mem_alloc_at(ptr, 128 * MIB)
    assert full.value.code == CUDA_ERROR_OUT_OF_MEMORY


def test_module_globals_are_evicted_and_restored_at_their_addresses(emulator):
    module = emulator.module_load(ModuleSource(original=PTX.encode(), ptx=PTX))
    ((ptr, size),) = emulator.module_memory(module).values()
    assert size == 256 and emulator.module_global(module, "counter") == (ptr, 256)
    assert read(emulator, ptr, 12) == bytes([7, 0, 0, 0, 8, 0, 0, 0, 9, 0, 0, 0])
    used = emulator.mem_info()[0]
    emulator.module_evict(module)
    assert emulator.mem_info()[0] == used + 256
    emulator.module_restore(module)
    assert emulator.mem_info()[0] == used
    assert emulator.module_global(module, "counter") == (ptr, 256)
    assert read(emulator, ptr, 12) == bytes(12)      # the caller writes the saved bytes back
    emulator.module_evict(module)
    emulator.module_unload(module)                   # an evicted module frees nothing twice
    assert emulator.mem_info()[0] == emulator.mem_info()[1]


def test_physical_memory_is_read_and_written_mapped_or_not(emulator):
    handle = emulator.vmm_create(GRANULARITY)
    base = emulator.vmm_reserve(2 * GRANULARITY, GRANULARITY)
    emulator.vmm_map(base + GRANULARITY, GRANULARITY, 0, handle)
    emulator.vmm_set_access(base + GRANULARITY, GRANULARITY, True)
    pattern = bytes(range(256)) * (GRANULARITY // 256)
    emulator.vmm_write(handle, 0, memoryview(pattern))
    assert read(emulator, base + GRANULARITY + 1000, 4) == pattern[1000:1004]
    emulator.vmm_unmap(base + GRANULARITY, GRANULARITY)
    back = bytearray(GRANULARITY)
    emulator.vmm_read(handle, 0, memoryview(back))
    assert back == pattern
    with pytest.raises(DeviceError):
        emulator.vmm_read(handle, GRANULARITY - 4, memoryview(bytearray(8)))    # past its end
    emulator.vmm_release(handle)
    with pytest.raises(DeviceError):
        emulator.vmm_read(handle, 0, memoryview(bytearray(4)))
    emulator.vmm_free(base, 2 * GRANULARITY)


def test_null_backend_restores_address_space():
    null = NullBackend(total_memory=64 * MIB)
    ptr = null.mem_alloc(MIB)
    null.mem_free(ptr)
    null.mem_alloc_at(ptr, MIB)
    with pytest.raises(DeviceError) as taken:
        null.mem_alloc_at(ptr + 256, 256)
    assert taken.value.code == CUDA_ERROR_ALREADY_MAPPED
    assert null.mem_info()[0] == 63 * MIB


def test_a_reservation_takes_its_address_hint_when_free(emulator):
    # What a cuda-backend server's migration target asks of its driver (through tally's own
    # driver, the emulator's reservations): the address, or elsewhere when it is taken.
    first = emulator.vmm_reserve(2 * GRANULARITY, GRANULARITY)
    emulator.vmm_free(first, 2 * GRANULARITY)
    hint = first + GRANULARITY
    assert emulator.vmm_reserve(GRANULARITY, GRANULARITY, hint) == hint
    elsewhere = emulator.vmm_reserve(GRANULARITY, GRANULARITY, hint)
    assert elsewhere != hint
    assert emulator.vmm_reserve(GRANULARITY, GRANULARITY, hint + 1) not in (hint + 1, 0)    # unaligned: ignored
    assert emulator.module_unmovable(emulator.module_load(ModuleSource(original=b"", ptx=PTX))) is None
