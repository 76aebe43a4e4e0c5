// Covers: __device__ global variables (.global with initializers, a pointer-sized global,
// a global array), generic addressing of a global symbol.

__device__ int global_counter = 0;
__device__ int offsets_table[8] = {0, 1, 1, 2, 3, 5, 8, 13};
__device__ unsigned long long scale_bits = 3;

// For i < n: out[i] = in[i] + offsets_table[i % 8] * (int)scale_bits; global_counter += n overall
// (every thread with i < n adds 1 atomically).  Launch: 1-D, grid*block >= n.
extern "C" __global__ void use_globals(const int* in, int* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = in[i] + offsets_table[i % 8] * (int)scale_bits;
        atomicAdd(&global_counter, 1);
    }
}

// counter_out[0] = global_counter (read through a generic pointer).  Launch: one thread.
extern "C" __global__ void read_counter(int* counter_out)
{
    int* p = &global_counter;
    counter_out[0] = *p;
}
