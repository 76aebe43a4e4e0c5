// Covers: a __constant__ array (ld.const), a constant with an initializer list.

__constant__ float poly_coeffs[4] = {1.0f, -0.5f, 0.25f, 2.0f};

// For i < n: y[i] = c0 + c1*x + c2*x^2 + c3*x^3 with c = poly_coeffs (Horner), x = x[i].
// Launch: 1-D, grid*block >= n.
extern "C" __global__ void poly_eval(const float* x, float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = poly_coeffs[0] + v * (poly_coeffs[1] + v * (poly_coeffs[2] + v * poly_coeffs[3]));
    }
}
