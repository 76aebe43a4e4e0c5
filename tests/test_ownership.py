import pytest

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, DeviceError
from tally.cluster.memory_limits import JobMemory
from tally.server.client.memory import Allocations


def test_ranges_inside_an_allocation_are_owned():
    a = Allocations()
    a.add(0x1000, 256)
    a.add(0x2000, 16)
    a.check_range(0x1000, 256)
    a.check_range(0x10F0, 16)
    assert a.find(0x20FF) is None
    assert a.find(0x200F) == (0x2000, 16)


@pytest.mark.parametrize("ptr,nbytes", [(0x0FFF, 1), (0x10F1, 16), (0x1100, 1), (0x3000, 4)])
def test_ranges_outside_are_rejected(ptr, nbytes):
    a = Allocations()
    a.add(0x1000, 256)
    with pytest.raises(DeviceError) as e:
        a.check_range(ptr, nbytes)
    assert e.value.code == CUDA_ERROR_INVALID_VALUE


def test_free_of_foreign_or_interior_pointer_is_invalid_value():
    a = Allocations()
    with a.charging(256):
        a.add(0x1000, 256)
    with pytest.raises(DeviceError) as e:
        a.remove(0x1004)
    assert e.value.code == CUDA_ERROR_INVALID_VALUE
    assert a.remove(0x1000) == 256
    assert a.used_bytes == 0 and len(a) == 0


def test_quota_denies_with_out_of_memory_and_counts_usage():
    a = Allocations(JobMemory(quota_bytes=1000))
    with a.charging(600):
        a.add(0x1000, 600)
    with pytest.raises(DeviceError) as e:
        with a.charging(401):
            pass
    assert e.value.code == CUDA_ERROR_OUT_OF_MEMORY
    assert "this job's memory quota is 1000 B, 600 B in use" in e.value.message
    assert a.used_bytes == 600 and a.peak_bytes == 600


def test_a_failed_allocation_gives_its_bytes_back():
    a = Allocations(JobMemory(quota_bytes=1000))
    with pytest.raises(DeviceError):
        with a.charging(800):
            raise DeviceError(CUDA_ERROR_OUT_OF_MEMORY, "the device is full")
    assert a.used_bytes == 0 and a.peak_bytes == 800
    with a.charging(1000):
        a.add(0x1000, 1000)
    assert a.remove(0x1000) == 1000 and a.used_bytes == 0


def test_clear_returns_everything_owned():
    a = Allocations()
    for ptr, size in ((0x3000, 1), (0x1000, 2)):
        with a.charging(size):
            a.add(ptr, size)
    assert a.used_bytes == 3
    assert a.clear() == [(0x1000, 2), (0x3000, 1)]
    assert a.used_bytes == 0
