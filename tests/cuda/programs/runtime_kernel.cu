// A kernel through whichever libcudart.so.13 the loader finds (test_runtime_matrix.py
// points LD_LIBRARY_PATH at each 13.x release).
#include <cstdio>

#include <cuda_runtime.h>

__global__ void iota(int* x) { x[threadIdx.x] = threadIdx.x; }

int main() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  int* d = nullptr;
  if (cudaMalloc(&d, 32 * sizeof(int)) != cudaSuccess) return 1;
  iota<<<1, 32>>>(d);
  int h[32];
  cudaError_t e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  int sum = 0;
  for (int v : h) sum += v;
  std::printf("runtime %d copy %d sum=%d\n", runtime, static_cast<int>(e), sum);
  return e == cudaSuccess && sum == 496 ? 0 : 1;
}
