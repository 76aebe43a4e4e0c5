// Warp-level synchronization (__shfl_down_sync, __syncwarp -> bar.warp.sync) around a
// block barrier, with whole warps returning early: unified synchronization must route
// the block barrier and the returns through its barrier point and leave the warp-level
// operations untouched.

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
