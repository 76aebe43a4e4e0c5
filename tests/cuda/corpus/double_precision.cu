// Covers: f64 arithmetic, f64 immediates (0d...), sqrt/division in double, f32<->f64 conversion.

// For i < n: y[i] = sqrt(x[i] * x[i] + 1.0) / (x[i] + 2.5) + (double)(float)x[i] * 0.125.
// Launch: 1-D, grid*block >= n.  Inputs x[i] >= 0.
extern "C" __global__ void double_math(const double* x, double* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        double v = x[i];
        y[i] = sqrt(v * v + 1.0) / (v + 2.5) + (double)(float)v * 0.125;
    }
}
