// A kernel through whichever libcudart.so.13 the loader finds (test_runtime_matrix.py
// points LD_LIBRARY_PATH at each 13.x release), then the same from a worker thread
// that never calls cudaSetDevice, as PyTorch's autograd threads and any thread pool
// do: the runtime makes no context current there through the driver's public calls,
// so tally binds the primary one (docs/export-tables.md, "Worker threads").
#include <cstdio>
#include <thread>

#include <cuda_runtime.h>

__global__ void iota(int* x, int offset) { x[threadIdx.x] = threadIdx.x + offset; }

// Sum of the 32 ints at d after iota(d, offset), and each call's result; 0: all succeeded.
int run(int* d, int offset, int* sum) {
  iota<<<1, 32>>>(d, offset);
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t synced = cudaDeviceSynchronize();
  int h[32];
  const cudaError_t copied = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  *sum = 0;
  for (int v : h) *sum += v;
  std::printf("launch %d sync %d copy %d sum=%d\n", launched, synced, copied, *sum);
  return launched != cudaSuccess || synced != cudaSuccess || copied != cudaSuccess;
}

int main() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  int* d = nullptr;
  if (cudaMalloc(&d, 32 * sizeof(int)) != cudaSuccess) return 1;
  int sum = 0;
  int failed = run(d, 0, &sum);
  std::printf("runtime %d sum=%d\n", runtime, sum);
  int thread_sum = 0, thread_failed = 1;
  std::thread worker([&] { thread_failed = run(d, 1, &thread_sum); });
  worker.join();
  std::printf("worker thread sum=%d\n", thread_sum);
  return !failed && sum == 496 && !thread_failed && thread_sum == 528 ? 0 : 1;
}
