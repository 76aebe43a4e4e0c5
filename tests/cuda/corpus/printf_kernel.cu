// Covers: printf in a kernel (vprintf call with a .local buffer, a .global string constant).
#include <cstdio>

// Thread 0 of each block prints its block index and value[blockIdx.x]; out[blockIdx.x] = value*2.
// Launch: 1-D, any shape.
extern "C" __global__ void print_values(const int* value, int* out)
{
    if (threadIdx.x == 0) {
        printf("block %d value %d\n", blockIdx.x, value[blockIdx.x]);
        out[blockIdx.x] = value[blockIdx.x] * 2;
    }
}
