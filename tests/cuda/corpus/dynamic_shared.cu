// Covers: extern __shared__ (unsized .shared array), %dynamic_smem_size, barrier.

// Reverses each block's chunk: out[base + t] = in[base + blockDim.x - 1 - t], base = blockIdx.x*blockDim.x.
// Launch: 1-D, dynamic shared memory = blockDim.x * 4 bytes, grid*block == number of elements.
extern "C" __global__ void reverse_block(const int* in, int* out)
{
    extern __shared__ int buffer[];
    int base = blockIdx.x * blockDim.x;
    buffer[threadIdx.x] = in[base + threadIdx.x];
    __syncthreads();
    out[base + threadIdx.x] = buffer[blockDim.x - 1 - threadIdx.x];
}

// sizes[blockIdx.x] = dynamic shared memory size of the launch in bytes (thread 0 writes).
// Launch: 1-D, any shape, any dynamic shared size.
extern "C" __global__ void report_dynamic_smem(unsigned* sizes)
{
    unsigned size;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(size));
    if (threadIdx.x == 0) sizes[blockIdx.x] = size;
}
