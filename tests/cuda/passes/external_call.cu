// Refused by every pass (compile with -rdc=true): a call to a device function defined in
// another translation unit, whose body is not in this PTX.

extern "C" __device__ int defined_elsewhere(int x);

// out[i] = defined_elsewhere(i).
// Launch: 1-D, grid*block == number of outputs.
extern "C" __global__ void call_external(int* out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = defined_elsewhere(i);
}
