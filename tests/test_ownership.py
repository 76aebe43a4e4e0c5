import pytest

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, DeviceError
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
    a.add(0x1000, 256)
    with pytest.raises(DeviceError) as e:
        a.remove(0x1004)
    assert e.value.code == CUDA_ERROR_INVALID_VALUE
    assert a.remove(0x1000) == 256
    assert a.used_bytes == 0 and len(a) == 0


def test_quota_denies_with_out_of_memory_and_counts_usage():
    a = Allocations(quota_bytes=1000)
    a.reserve(600)
    a.add(0x1000, 600)
    with pytest.raises(DeviceError) as e:
        a.reserve(401)
    assert e.value.code == CUDA_ERROR_OUT_OF_MEMORY
    a.reserve(400)
    assert a.peak_bytes == 600


def test_clear_returns_everything_owned():
    a = Allocations()
    a.add(0x3000, 1)
    a.add(0x1000, 2)
    assert a.clear() == [(0x1000, 2), (0x3000, 1)]
    assert a.used_bytes == 0
