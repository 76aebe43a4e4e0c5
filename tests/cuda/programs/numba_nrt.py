"""A numba-cuda kernel that allocates arrays on the device, for tests/test_e2e_numba.py:
with numba's runtime (NRT) enabled, `np.empty` in a kernel calls NRT_MemInfo_alloc,
which calls the device's `malloc`, and the array's last reference calls NRT_decref,
which calls `free`. The result is checked against numpy here; prints key=value lines."""
import numpy as np
from numba import config, cuda

config.CUDA_ENABLE_NRT = True
config.CUDA_NRT_STATS = True
from numba.cuda.memory_management import rtsys  # noqa: E402  (after the config it reads)

N = 256


@cuda.jit
def per_thread_arrays(out):
    i = cuda.grid(1)
    if i < out.size:
        scratch = np.empty(8, dtype=np.int64)     # one heap block per thread
        for k in range(8):
            scratch[k] = i * k
        total = 0
        for k in range(8):
            total += scratch[k]
        out[i] = total


out = cuda.device_array(N, dtype=np.int64)
rtsys.memsys_enable_stats()
before = rtsys.get_allocation_stats()
per_thread_arrays[N // 64, 64](out)
got = out.copy_to_host()
after = rtsys.get_allocation_stats()
want = np.arange(N, dtype=np.int64) * sum(range(8))
print(f"nrt_matches={int(np.array_equal(got, want))}")
# NRT's own counters: one allocation and one free per thread, through malloc and free
print(f"nrt_allocs={after.alloc - before.alloc} nrt_frees={after.free - before.free}")
