// Covers: the simplest kernel: 1-D index, bounds check, global loads/stores.

// c[i] = a[i] + b[i] for i < n.  Launch: 1-D grid, any block size, grid*block >= n.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
