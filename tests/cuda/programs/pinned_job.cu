// A job whose module has a variable the cuda backend cannot relocate: `op`, a
// __device__ function pointer whose initializer is a function's address (as a
// device-side virtual table is), which only the driver knows. With --suspendable
// the module's variables stay where the driver put them ("pinned"): a suspension
// leaves them on the device and `migrate` refuses the job up front, saying why.
// Runs ROUNDS rounds of a kernel calling through `op`; prints "looping" after the
// first (with the argument `wait`, then waits for a line on stdin), then checks:
// wrong= total= (0 and ROUNDS * N when nothing was lost or repeated).
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

constexpr int N = 4096;
constexpr int ROUNDS = 8;

__device__ int twice(int x) { return 2 * x; }
__device__ int (*op)(int) = twice;
__device__ unsigned total;

__global__ void apply(int* out, int n, int round) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] += op(i + round);
    atomicAdd(&total, 1u);
  }
}

int main(int argc, char** argv) {
  const bool wait_for_line = argc > 1 && strcmp(argv[1], "wait") == 0;
  int* out;
  CHECK(cudaMalloc(&out, N * sizeof(int)));
  CHECK(cudaMemset(out, 0, N * sizeof(int)));
  for (int round = 0; round < ROUNDS; ++round) {
    apply<<<N / 128, 128>>>(out, N, round);
    CHECK(cudaDeviceSynchronize());
    if (round == 0) {
      printf("looping\n");
      fflush(stdout);
      char line[16];
      if (wait_for_line && fgets(line, sizeof line, stdin) == nullptr) return 1;
    }
  }
  static int host[N];
  unsigned count = 0;
  CHECK(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpyFromSymbol(&count, total, sizeof count));
  int wrong = 0;
  for (int i = 0; i < N; ++i) {
    int expected = 0;
    for (int round = 0; round < ROUNDS; ++round) expected += 2 * (i + round);
    wrong += host[i] != expected;
  }
  printf("wrong=%d total=%u\n", wrong, count);
  return 0;
}
