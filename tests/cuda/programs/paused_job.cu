// A best-effort job an operator pauses and resumes (tally-server pause/resume).
// Waits for a line on stdin, then queues ROUNDS kernels over one array and prints
// "launched"; cudaDeviceSynchronize must wait while the job is paused; then it
// prints "synced" and checks every element: wrong=<elements off> (0 when the
// pause lost and repeated nothing).
#include <cstdio>
#include <cuda_runtime.h>

#include "runtime_check.h"

constexpr int N = 1 << 14;
constexpr int ROUNDS = 8;

__global__ void step(int* data, int round, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * 3 + round + (i & 7);
}

int main() {
  static int host[N];
  int* data = nullptr;
  CHECK(cudaMalloc(&data, N * sizeof(int)));
  CHECK(cudaMemset(data, 0, N * sizeof(int)));
  CHECK(cudaDeviceSynchronize());
  printf("ready\n");
  fflush(stdout);
  char line[16];
  if (fgets(line, sizeof line, stdin) == nullptr) return 1;
  for (int round = 0; round < ROUNDS; ++round) step<<<N / 128, 128>>>(data, round, N);
  CHECK(cudaGetLastError());
  printf("launched\n");
  fflush(stdout);
  CHECK(cudaDeviceSynchronize());
  printf("synced\n");
  CHECK(cudaMemcpy(host, data, sizeof host, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < N; ++i) {
    int expected = 0;
    for (int round = 0; round < ROUNDS; ++round) expected = expected * 3 + round + (i & 7);
    wrong += host[i] != expected;
  }
  printf("wrong=%d\n", wrong);
  return 0;
}
