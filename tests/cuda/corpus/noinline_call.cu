// Covers: a __noinline__ __device__ function, so the PTX has a .func with return
// parameter and a call.uni with param declarations; a recursive function (no inlining possible).

// Returns a*a + b (kept out of line).
extern "C" __device__ __noinline__ int square_plus(int a, int b)
{
    return a * a + b;
}

// Recursive: sum of 0..k.
extern "C" __device__ __noinline__ int triangular(int k)
{
    return k <= 0 ? 0 : k + triangular(k - 1);
}

// out[i] = in[i]*in[i] + i and tri[i] = in[i]*(in[i]+1)/2 for in[i] in 0..20.
// Launch: 1-D, grid*block >= n.
extern "C" __global__ void call_device(const int* in, int* out, int* tri, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = square_plus(in[i], i);
        tri[i] = triangular(in[i]);
    }
}
