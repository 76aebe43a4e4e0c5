"""The null device's address space: allocations and reservations get distinct
aligned ranges inside it, an absurd request is refused with OUT_OF_MEMORY instead
of pushing later addresses past 2**64 (found by tally-bench fuzz: every later
allocation of every job then crashed its handler), and freed ranges are used
again once the top is reached."""
from __future__ import annotations

import pytest

from tally.backends.null import ADDRESS_END, BASE_ADDRESS, NullBackend
from tally.protocol.errors import CUDA_ERROR_OUT_OF_MEMORY, DeviceError

TIB = 1 << 40


def test_an_absurd_reservation_is_refused_and_the_next_allocation_still_fits():
    b = NullBackend()
    for nbytes, alignment in (((1 << 64) - 1, 0), (1 << 63, 0), (4096, 1 << 62)):
        with pytest.raises(DeviceError) as refused:
            b.vmm_reserve(nbytes, alignment)
        assert refused.value.code == CUDA_ERROR_OUT_OF_MEMORY and "address space" in refused.value.message
    ptr = b.mem_alloc(4096)
    assert BASE_ADDRESS <= ptr < ADDRESS_END and ptr % 256 == 0


def test_freed_ranges_are_used_again_once_the_top_is_reached():
    b = NullBackend()
    held = [b.vmm_reserve(63 * TIB, 0) for _ in range(4)]      # 252 of the 256 TiB
    with pytest.raises(DeviceError):
        b.vmm_reserve(8 * TIB, 0)
    b.vmm_free(held[1], 63 * TIB)
    again = b.vmm_reserve(63 * TIB, 0)                           # the top is full: the freed gap
    assert again == held[1]
    small = [b.mem_alloc(1000) for _ in range(100)]
    ranges = sorted([(p, 1000) for p in small] + [(p, 63 * TIB) for p in (held[0], again, held[2], held[3])])
    for (a, n), (c, _) in zip(ranges, ranges[1:]):
        assert a + n <= c                                        # no two ranges overlap
    assert all(BASE_ADDRESS <= p and p + n <= ADDRESS_END for p, n in ranges)
