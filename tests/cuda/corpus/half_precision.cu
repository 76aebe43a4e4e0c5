// Covers: __half arithmetic from cuda_fp16.h (f16 registers, cvt between f16 and f32, .b16 moves).
#include <cuda_fp16.h>

// For i < n: out[i] = (half)(a[i] * b[i] + a[i]) computed in half precision, and
// as_float[i] = (float)out[i].  Compare with numpy float16 arithmetic.
// Launch: 1-D, grid*block >= n.
extern "C" __global__ void half_fma(const __half* a, const __half* b, __half* out, float* as_float, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __half r = __hadd(__hmul(a[i], b[i]), a[i]);
        out[i] = r;
        as_float[i] = __half2float(r);
    }
}
