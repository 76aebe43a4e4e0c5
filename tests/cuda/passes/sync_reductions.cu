// Barriers nvcc puts inside nested { } scopes: __syncthreads_count / _and / _or
// (bar.red.popc / .and / .or) and inline asm. Unified synchronization flattens the scopes
// and routes the reductions through its second (popc) barrier.

// For threads with i < n: count[blockIdx.x] = number of live threads with in[i] > 0,
// all[blockIdx.x] = 1 if every live thread has in[i] > 0, any[blockIdx.x] = 1 if some
// live thread has in[i] < 0 (thread 0 writes; threads with i >= n return first, so they
// are not part of the reductions).
// Launch: 1-D, any block size, grid*block >= n, every block has at least one i < n.
extern "C" __global__ void block_votes(const int* in, int* count, int* all, int* any, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int positive = __syncthreads_count(in[i] > 0);
    int all_positive = __syncthreads_and(in[i] > 0);
    int some_negative = __syncthreads_or(in[i] < 0);
    if (threadIdx.x == 0) {
        count[blockIdx.x] = positive;
        all[blockIdx.x] = all_positive;
        any[blockIdx.x] = some_negative;
    }
}

// A barrier inside an inline-asm scope with its own register. out[i] = i.
// Launch: 1-D, any shape.
extern "C" __global__ void barrier_in_asm_scope(int* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    asm volatile("{\n\t.reg .pred p;\n\tsetp.eq.u32 p, %0, 0;\n\tbar.sync 0;\n\t}" :: "r"(i) : "memory");
    out[i] = i;
}
