// A job as a Kubernetes pod runs it: an ordinary CUDA program, started without
// tally-run, that finds tally only through what the device plugin's Allocate put
// in its environment and mounts. It reports the memory it sees (the quota shows
// as the device's total), computes a vector add, tries to allocate past its
// quota, then waits for a line on stdin so the test can read the server's status.
#include <cstdio>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void add(const int* a, const int* b, int* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  size_t free_bytes = 0, total_bytes = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int n = 4096;
  int a[n], b[n], c[n];
  for (int i = 0; i < n; ++i) {
    a[i] = i;
    b[i] = 3 * i;
  }
  int *da, *db, *dc;
  CHECK(cudaMalloc(&da, sizeof a));
  CHECK(cudaMalloc(&db, sizeof b));
  CHECK(cudaMalloc(&dc, sizeof c));
  CHECK(cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice));
  add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CHECK(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += c[i] != 4 * i;
  void* big = nullptr;
  cudaError_t over = cudaMalloc(&big, total_bytes + (1 << 20));  // past the quota: must be refused
  cudaGetLastError();
  printf("total=%zu wrong=%d over_quota=%d\n", total_bytes, wrong, (int)over);
  printf("ready\n");
  fflush(stdout);
  char line[16];
  if (!fgets(line, sizeof line, stdin)) return 3;
  return 0;
}
