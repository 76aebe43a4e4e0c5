// Separate compilation as CuPy's NVCC backend does it (nvcc -dc, then nvcc --cubin
// --device-link): `vadd` (c = a + b, jit_cubin.cu's kernel) calls a function defined
// in another translation unit (jit_rdc_add.cu) through a kernel it launches, so the
// loaded cubin is nvlink's, linked with the device runtime. tests/test_e2e_jit_capture.py
// runs it on the emulator, which needs the PTX tally-nvlink recorded for it.
extern __device__ float add_pair(float x, float y);

extern "C" __global__ void vadd_block(const float* a, const float* b, float* c, int n, int first) {
  int i = first + threadIdx.x;
  if (i < n) c[i] = add_pair(a[i], b[i]);
}

extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
  if (threadIdx.x == 0) vadd_block<<<1, blockDim.x>>>(a, b, c, n, blockIdx.x * blockDim.x);
}
