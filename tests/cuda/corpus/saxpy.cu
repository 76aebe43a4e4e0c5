// Covers: scalar float parameter, grid-stride loop.

// y[i] = alpha * x[i] + y[i] for i < n.  Launch: 1-D grid and block of any size
// (the grid-stride loop covers n with any launch).
extern "C" __global__ void saxpy(int n, float alpha, const float* x, float* y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = alpha * x[i] + y[i];
}
