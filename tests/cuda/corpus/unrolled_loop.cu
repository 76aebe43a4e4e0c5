// Covers: #pragma unroll (fully unrolled and partially unrolled loops), .pragma "nounroll".

// For i < n: out[i] = sum_{k=0..7} in[i*8 + k] * (k + 1)  (fully unrolled).
// Launch: 1-D, grid*block >= n.
extern "C" __global__ void dot8_unrolled(const float* in, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) acc += in[i * 8 + k] * (float)(k + 1);
    out[i] = acc;
}

// For i < n: out[i] = sum_{k=0..len-1} in[i*len + k] (loop by 4 with remainder, plus a
// non-unrolled loop that counts len down to check[i] = len).
// Launch: 1-D, grid*block >= n.
extern "C" __global__ void row_sum(const float* in, float* out, int* check, int n, int len)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
#pragma unroll 4
    for (int k = 0; k < len; ++k) acc += in[i * len + k];
    out[i] = acc;
    int c = 0;
#pragma unroll 1
    for (int k = len; k > 0; --k) ++c;
    check[i] = c;
}
