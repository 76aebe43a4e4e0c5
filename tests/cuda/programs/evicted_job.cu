// A best-effort job evicted while its kernels are queued (tally-server evict).
// Holds argv[1] MiB of device memory, queues argv[2] long kernels, prints "queued"
// and waits for a line on stdin (the test evicts it meanwhile). Then it tries a
// launch, a synchronization and an allocation, as a framework's next steps would,
// and prints what each returned: launch=<e> sync=<e> malloc=<e>. It exits 1 when
// any failed, as a program whose CUDA calls fail does. A line starting with "q"
// makes it exit 0 at once instead, asking for nothing (a job that never looks).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void spin(unsigned* out, unsigned iterations) {
  unsigned v = threadIdx.x;
  for (unsigned i = 0; i < iterations; ++i) v = v * 1664525u + 1013904223u;
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], nullptr, 0) : 64;
  int kernels = argc > 2 ? atoi(argv[2]) : 16;
  char* held = nullptr;
  unsigned* out = nullptr;
  CHECK(cudaMalloc(&held, mib << 20));
  CHECK(cudaMalloc(&out, 64 * 32 * sizeof(unsigned)));
  CHECK(cudaDeviceSynchronize());
  for (int k = 0; k < kernels; ++k) spin<<<64, 32>>>(out, 2000000u);
  CHECK(cudaGetLastError());
  printf("queued\n");
  fflush(stdout);
  char line[16];
  if (fgets(line, sizeof line, stdin) == nullptr) return 2;
  if (line[0] == 'q') return 0;
  spin<<<1, 32>>>(out, 1);
  cudaError_t launch = cudaGetLastError();
  cudaError_t sync = cudaDeviceSynchronize();
  void* more = nullptr;
  cudaError_t malloc_result = cudaMalloc(&more, 1 << 20);
  printf("launch=%d sync=%d malloc=%d\n", (int)launch, (int)sync, (int)malloc_result);
  return launch == cudaSuccess && sync == cudaSuccess && malloc_result == cudaSuccess ? 0 : 1;
}
