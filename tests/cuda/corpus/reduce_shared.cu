// Covers: static shared memory, __syncthreads in a loop, tree reduction.

#define REDUCE_BLOCK 256

// out[blockIdx.x] = sum(in[blockIdx.x*256 : blockIdx.x*256 + 256]), elements past n count 0.
// Launch: 1-D, blockDim.x == 256, gridDim.x == ceil(n / 256).
extern "C" __global__ void reduce_sum(const float* in, float* out, int n)
{
    __shared__ float partial[REDUCE_BLOCK];
    unsigned tid = threadIdx.x;
    unsigned i = blockIdx.x * REDUCE_BLOCK + tid;
    partial[tid] = (i < n) ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned stride = REDUCE_BLOCK / 2; stride > 0; stride >>= 1) {
        if (tid < stride) partial[tid] += partial[tid + stride];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = partial[0];
}
