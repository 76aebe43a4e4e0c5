"""numba's mapped host memory, as numba-cuda's own test_host_alloc.py uses it
(test_host_alloc_driver, test_host_alloc_mapped): memhostalloc(mapped=True) and
cuda.mapped_array, memset through the device pointer (device_memory_size asks
cuMemGetAddressRange), a copy back from it, and a kernel writing through it.
Prints key=value lines the test checks."""
import numpy as np
from numba import cuda
from numba.cuda.cudadrv import driver

n = 32
mem = cuda.current_context().memhostalloc(n, mapped=True)
ary = np.ndarray(shape=n, dtype=np.uint8, buffer=mem)
driver.device_memset(mem, 0xAB, n)
print(f"driver_memset_seen={int(np.all(ary == 0xAB))}")
ary.fill(n)
recv = np.empty_like(ary)
driver.device_to_host(recv, mem, ary.size)
print(f"device_to_host_good={int(np.all(recv == n))}")

mapped = cuda.mapped_array(10, dtype=np.uint32)
mapped.fill(123)
size = driver.device_memory_size(mapped)
driver.device_memset(mapped, 0, size)
print(f"mapped_size={size} mapped_zeroed={int(np.all(mapped == 0))}")


@cuda.jit
def square_index(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = i * i


square_index[1, 32](mapped)
cuda.synchronize()
print(f"kernel_good={int(list(mapped) == [i * i for i in range(10)])}")
