// Kernels whose device functions come from a static library (library_functions.cu,
// archived with ar): linked by the JIT linker from CU_JIT_INPUT_LIBRARY. `record` is
// declared here as returning a 64-bit value, as numba declares C-ABI void functions,
// while the library defines it void: NVIDIA's linker links that, and so does tally's.
extern "C" __device__ int scale(int x);
extern "C" __device__ long long record(int* slot, int value);

extern "C" __global__ void apply(int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) record(out + i, scale(i));
}
