// Covers: float intrinsics (expf, sqrtf, __fdividef, rsqrtf, fmaf), integer div/mod (signed and
// unsigned), 64-bit arithmetic, min/max, conversions, bit operations (__popc, __clz, __brev, __ffs).

// For i < n, with x = xs[i] (float, > 0) and k = ks[i] (int, != 0):
//   f[4i+0] = expf(x), f[4i+1] = sqrtf(x), f[4i+2] = __fdividef(x, x + 1), f[4i+3] = fmaf(x, x, rsqrtf(x))
// (compare with tolerances: __fdividef and rsqrtf are approximate).
// Launch: 1-D, grid*block >= n.
extern "C" __global__ void float_math(const float* xs, float* f, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = xs[i];
    f[4 * i + 0] = expf(x);
    f[4 * i + 1] = sqrtf(x);
    f[4 * i + 2] = __fdividef(x, x + 1.0f);
    f[4 * i + 3] = fmaf(x, x, rsqrtf(x));
}

// For i < n, with a = as[i], k = ks[i] (k != 0), u = (unsigned)a:
//   r[8i+0] = a / k, r[8i+1] = a % k (C truncation), r[8i+2] = u / 7u, r[8i+3] = u % 7u,
//   r[8i+4] = min(a, k), r[8i+5] = max(a, k), r[8i+6] = (int)(float)a >> 1 (float round trip),
//   r[8i+7] = (int)((float)a * 0.5f) (float to int truncation).
// Launch: 1-D, grid*block >= n.
extern "C" __global__ void int_math(const int* as, const int* ks, int* r, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int a = as[i], k = ks[i];
    unsigned u = (unsigned)a;
    r[8 * i + 0] = a / k;
    r[8 * i + 1] = a % k;
    r[8 * i + 2] = (int)(u / 7u);
    r[8 * i + 3] = (int)(u % 7u);
    r[8 * i + 4] = min(a, k);
    r[8 * i + 5] = max(a, k);
    r[8 * i + 6] = ((int)(float)a) >> 1;
    r[8 * i + 7] = (int)((float)a * 0.5f);
}

// For i < n, with v = vs[i] (uint32):
//   bits[4i+0] = __popc(v), bits[4i+1] = __clz(v), bits[4i+2] = __brev(v), bits[4i+3] = __ffs(v)
// Launch: 1-D, grid*block >= n.
extern "C" __global__ void bit_ops(const unsigned* vs, unsigned* bits, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned v = vs[i];
    bits[4 * i + 0] = __popc(v);
    bits[4 * i + 1] = __clz(v);
    bits[4 * i + 2] = __brev(v);
    bits[4 * i + 3] = __ffs(v);
}

// For i < n, 64-bit: w[3i+0] = a[i] * b[i] + (a[i] >> 3) (wrapping uint64),
// w[3i+1] = a[i] / (b[i] | 1), w[3i+2] = (uint64)(int64)(int32)(a[i]) (sign extension of the low word).
// Launch: 1-D, grid*block >= n.
extern "C" __global__ void wide_math(const unsigned long long* a, const unsigned long long* b,
                                     unsigned long long* w, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned long long x = a[i], y = b[i];
    w[3 * i + 0] = x * y + (x >> 3);
    w[3 * i + 1] = x / (y | 1ull);
    w[3 * i + 2] = (unsigned long long)(long long)(int)(unsigned)x;
}
