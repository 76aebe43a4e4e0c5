// Covers: shared-memory atomics (atom.shared.add), global atomics (red/atom.global.add),
// a strided loop initialising shared memory.

#define HIST_BINS 64

// bins[v % 64] += 1 for every v in data[0:n] (bins is uint32[64], zeroed by the host).
// Launch: 1-D, any block size, any grid (grid-stride loop).
extern "C" __global__ void histogram64(const unsigned* data, int n, unsigned* bins)
{
    __shared__ unsigned local[HIST_BINS];
    for (int b = threadIdx.x; b < HIST_BINS; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[data[i] % HIST_BINS], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < HIST_BINS; b += blockDim.x)
        if (local[b] != 0) atomicAdd(&bins[b], local[b]);
}

// Returns the old value, so nvcc must emit atom (not red): old[i] = counter before the add.
// counter is a single uint32 (host-zeroed); after the kernel it equals n.
// Launch: 1-D, grid*block >= n.
extern "C" __global__ void fetch_add_ticket(unsigned* counter, unsigned* old, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) old[i] = atomicAdd(counter, 1u);
}
