// Kernels each refused by some passes for one reason, named in the kernel's name.
// Compiled for sm_90 (griddepcontrol needs it).

// A device function reading blockIdx: slicing/PTB only rewrite the kernel body.
// out[blockIdx.x] = blockIdx.x (thread 0).
extern "C" __device__ __noinline__ int block_of_caller() { return blockIdx.x; }
extern "C" __global__ void ctaid_in_function(int* out)
{
    int b = block_of_caller();
    if (threadIdx.x == 0) out[b] = b;
}

// A barrier inside a device function: unified sync needs every barrier in the kernel.
// out[t] = in[(t + 1) % blockDim.x] within each block (blockDim.x <= 256).
extern "C" __device__ __noinline__ void stage_and_sync(int* tile, int v)
{
    tile[threadIdx.x] = v;
    __syncthreads();
}
extern "C" __global__ void barrier_in_function(const int* in, int* out)
{
    __shared__ int tile[256];
    int base = blockIdx.x * blockDim.x;
    stage_and_sync(tile, in[base + threadIdx.x]);
    out[base + threadIdx.x] = tile[(threadIdx.x + 1) % blockDim.x];
}

// Producer/consumer named barrier with a thread count (bar.arrive + bar.sync 1, N):
// warp 0 writes, warp 1 reads. out[t] = 10 * t for t < 32 (blockDim.x == 64).
extern "C" __global__ void named_barrier(int* out)
{
    __shared__ int box[32];
    unsigned t = threadIdx.x;
    if (t < 32) {
        box[t] = 10 * t;
        asm volatile("bar.arrive 1, 64;" ::: "memory");
    } else {
        asm volatile("bar.sync 1, 64;" ::: "memory");
        out[t - 32] = box[t - 32];
    }
}

// exit inside a device function: a PTB worker thread would leave the task loop.
// out[i] = i for i < n; threads with i >= n exit.
extern "C" __device__ __noinline__ void leave_if(bool done)
{
    if (done) asm volatile("exit;");
}
extern "C" __global__ void exit_in_function(int* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    leave_if(i >= n);
    out[i] = i;
    __syncthreads();
}

// %gridid: differs between the launches a sliced or PTB kernel is split into.
// out[i] = low 32 bits of %gridid.
extern "C" __global__ void reads_gridid(unsigned long long* out)
{
    unsigned long long g;
    asm("mov.u64 %0, %%gridid;" : "=l"(g));
    out[blockIdx.x * blockDim.x + threadIdx.x] = g;
}

// Programmatic dependent launch: waits for the preceding grid (griddepcontrol.wait).
// out[i] = in[i] + 1.
extern "C" __global__ void dependent_launch(const int* in, int* out)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = in[i] + 1;
}

// A call through a function pointer: the callee cannot be known.
// out[i] = i * 2 or i * 3 depending on the parity of the block.
extern "C" __device__ __noinline__ int twice(int x) { return 2 * x; }
extern "C" __device__ __noinline__ int thrice(int x) { return 3 * x; }
extern "C" __global__ void indirect_call(int* out)
{
    int (*fn)(int) = (blockIdx.x & 1) ? thrice : twice;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = fn(i);
}

// %total_smem_size: PTB adds 8 bytes of shared memory, so only PTB refuses it.
// sizes[blockIdx.x] = total shared memory of the launch (thread 0).
extern "C" __global__ void reads_total_smem(unsigned* sizes)
{
    unsigned size;
    asm("mov.u32 %0, %%total_smem_size;" : "=r"(size));
    if (threadIdx.x == 0) sizes[blockIdx.x] = size;
}

// Uses barrier 15 by number: PTB without unified sync (ptb-raw) uses 15 for its task
// hand-out, so only ptb-raw refuses. out[i] = i.
extern "C" __global__ void uses_barrier_15(int* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    asm volatile("bar.sync 15;" ::: "memory");
    out[i] = i;
}
