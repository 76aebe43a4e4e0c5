// Warp-level synchronization (__shfl_down_sync, __syncwarp -> bar.warp.sync) around a
// block barrier. Unified synchronization and PTB keep returned threads alive, so a warp
// operation that a thread of its warp may skip by returning could wait for it forever
// (ptx_passes/passes/warp_sync.py): the first kernel is refused for them (its returns are
// whole warps, which the static check cannot see), the second is transformed.

// out[blockIdx.x] = sum of in[blockIdx.x * blockDim.x + t] over the threads t of the
// first n_warps warps (the other warps return at once); thread 0 writes.
// Launch: 1-D, blockDim.x a multiple of 32 and <= 1024, 1 <= n_warps <= blockDim.x / 32.
extern "C" __global__ void warp_then_block_sum(const int* in, int* out, int n_warps)
{
    __shared__ int partial[32];
    unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp >= n_warps) return;
    int v = in[blockIdx.x * blockDim.x + threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) partial[warp] = v;
    __syncwarp();
    __syncthreads();
    if (threadIdx.x == 0) {
        int sum = 0;
        for (int w = 0; w < n_warps; ++w) sum += partial[w];
        out[blockIdx.x] = sum;
    }
}

// Warp shuffles that every thread executes before any return, then a block barrier and
// an early return of every thread but thread 0: out[blockIdx.x] = sum of the block's
// in[] (thread 0 adds the warp sums).
// Launch: 1-D, blockDim.x a multiple of 32 and <= 1024.
extern "C" __global__ void shuffle_then_block_sum(const int* in, int* out)
{
    __shared__ int partial[32];
    int v = in[blockIdx.x * blockDim.x + threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x != 0) return;
    int sum = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) sum += partial[w];
    out[blockIdx.x] = sum;
}
