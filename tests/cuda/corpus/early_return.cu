// Covers: returns before and after __syncthreads (the case unified synchronization exists for).

// Threads with i >= n return before the barrier; the rest stage in[i] in shared memory,
// synchronise, then thread t writes out[i] = tile[t] + tile[(t + 1) % live], where live is the
// number of threads of this block with i < n.  Thread 0 of each block returns after the
// barrier without writing (out[block_start] stays untouched).
// Launch: 1-D, blockDim.x <= 128, any grid.
extern "C" __global__ void early_exit_neighbors(const int* in, int* out, int n)
{
    __shared__ int tile[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    tile[threadIdx.x] = in[i];
    __syncthreads();
    if (threadIdx.x == 0) return;
    int live = min((int)blockDim.x, n - (int)(blockIdx.x * blockDim.x));
    out[i] = tile[threadIdx.x] + tile[(threadIdx.x + 1) % live];
}

// Returns only after the barrier: out[i] = in[i] * 2 for i < n, nothing else.
// Launch: 1-D, any shape.
extern "C" __global__ void return_after_barrier(const int* in, int* out, int n)
{
    __shared__ int flag;
    if (threadIdx.x == 0) flag = 2;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = in[i] * flag;
}
