// The kernel of tests/test_jit_capture.py: its PTX is assembled by tally-ptxas into
// the cubin the job loads, as a JIT compiler's would be.
extern "C" __global__ void vadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
