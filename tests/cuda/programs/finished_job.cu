// A best-effort job whose work is done when it is evicted. It fills a buffer with a
// kernel, checks the result (prints "done ok=<0|1>"), and waits for a line on stdin
// (the test evicts it meanwhile). Then, by argv[1]:
//   exit  frees its buffer, ignoring what that returns, and exits 0: a finished job
//         on its way out (its releases fail after the eviction, harmlessly);
//   more  launches another kernel and synchronizes, ignoring the errors, and exits
//         0: a job that asks for work after the eviction and does not check.
// It prints what its calls after the line returned: free=<e> or launch=<e> sync=<e>.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void fill(int* out, int value) { out[blockIdx.x * blockDim.x + threadIdx.x] = value; }

int main(int argc, char** argv) {
  const bool more = argc > 1 && strcmp(argv[1], "more") == 0;
  const int n = 8 * 64;
  int* out = nullptr;
  CHECK(cudaMalloc(&out, n * sizeof(int)));
  fill<<<8, 64>>>(out, 7);
  int host[n];
  CHECK(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (int i = 0; i < n; ++i) ok = ok && host[i] == 7;
  printf("done ok=%d\n", ok ? 1 : 0);
  fflush(stdout);
  char line[16];
  if (fgets(line, sizeof line, stdin) == nullptr) return 2;
  if (more) {
    fill<<<8, 64>>>(out, 8);
    cudaError_t launch = cudaGetLastError();
    cudaError_t sync = cudaDeviceSynchronize();
    printf("launch=%d sync=%d\n", (int)launch, (int)sync);
  } else {
    printf("free=%d\n", (int)cudaFree(out));
  }
  return 0;
}
