// Covers: atomicCAS loop (atom.global.cas), float atomic max emulated through int bit casts.

__device__ float atomic_max_float(float* addr, float value)
{
    int* as_int = (int*)addr;
    int old = *as_int;
    while (__int_as_float(old) < value) {
        int assumed = old;
        old = atomicCAS(as_int, assumed, __float_as_int(value));
        if (old == assumed) break;
    }
    return __int_as_float(old);
}

// result[0] = max(result[0], max(x[0:n])) (host initialises result[0], e.g. to -inf).
// Launch: 1-D, grid*block >= n.
extern "C" __global__ void max_reduce_cas(const float* x, float* result, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomic_max_float(result, x[i]);
}
