"""A numba-cuda kernel that synchronizes its whole grid, for tests/test_e2e_numba.py:
`cuda.cg.this_grid().sync()` compiles to libcudadevrt's cudaCGGetIntrinsicHandle and
cudaCGSynchronize, numba links libcudadevrt.a and launches the kernel cooperatively
(cuLaunchCooperativeKernel). Rounds separated by grid barriers each read what every
other block wrote in the round before; the result is checked against numpy here;
prints key=value lines."""
import numpy as np
from numba import cuda

ROUNDS = 4
THREADS = 64


@cuda.jit("void(int64[:], int64[:], int64)")
def ring_rounds(values, scratch, rounds):
    grid = cuda.cg.this_grid()
    b = cuda.blockIdx.x
    n = cuda.gridDim.x
    if cuda.threadIdx.x == 0:
        values[b] = b
    grid.sync()
    for _ in range(rounds):
        if cuda.threadIdx.x == 0:
            scratch[b] = values[b] + values[(b + n - 1) % n]
        grid.sync()
        if cuda.threadIdx.x == 0:
            values[b] = scratch[b]
        grid.sync()


kernel = next(iter(ring_rounds.overloads.values()))
largest = kernel.max_cooperative_grid_blocks(THREADS)
blocks = min(24, largest)
values = cuda.device_array(blocks, dtype=np.int64)
scratch = cuda.device_array(blocks, dtype=np.int64)
ring_rounds[blocks, THREADS](values, scratch, ROUNDS)
expect = np.arange(blocks, dtype=np.int64)
for _ in range(ROUNDS):
    expect = expect + np.roll(expect, 1)
got = values.copy_to_host()
print(f"grid_sync_blocks={blocks} grid_sync_matches={int(np.array_equal(got, expect))} "
      f"largest_grid_positive={int(largest > 0)}")
