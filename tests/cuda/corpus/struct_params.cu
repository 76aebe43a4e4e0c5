// Covers: structs and vectors passed by value (.param .align N .b8 name[size]), bool/char/short
// parameters, the parameter-layout example from DESIGN.md.

struct Mixed { char c; double d; int i; };
struct FloatArray5 { alignas(16) float v[5]; };

// Layout test kernel kp(char, struct{char;double;int}, float4, short, float[5] aligned 16,
// int*, bool): parameter offsets 0/8/32/48/64/96/104, sizes 1/24/16/2/32/8/1, total 105.
// With acc = c + m.c + m.d + m.i + f.x + f.y + f.z + f.w + s + sum(arr.v) + p[0] + flag
// (summed in double, flag as 0/1): p[1] = (int)acc (truncation).  Launch: one thread.
extern "C" __global__ void kp(char c, Mixed m, float4 f, short s, FloatArray5 arr, int* p, bool flag)
{
    double acc = c + m.c + m.d + m.i + f.x + f.y + f.z + f.w + s;
    for (int k = 0; k < 5; ++k) acc += arr.v[k];
    p[1] = (int)(acc + p[0] + (flag ? 1.0 : 0.0));
}

struct Affine { float scale; float shift; int n; };

// y[i] = t.scale * x[i] + t.shift for i < t.n.  Launch: 1-D, grid*block >= t.n.
extern "C" __global__ void affine(Affine t, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < t.n) y[i] = t.scale * x[i] + t.shift;
}
