// Vector add through the CUDA runtime, checked on the host: the smallest complete
// CUDA program (allocate, copy in, launch, copy out, free).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 1000;
  const size_t bytes = n * sizeof(float);
  float* a = (float*)malloc(bytes);
  float* b = (float*)malloc(bytes);
  float* c = (float*)malloc(bytes);
  for (int i = 0; i < n; ++i) {
    a[i] = (float)i;
    b[i] = 2.0f * i + 1.0f;
    c[i] = -1.0f;
  }
  float *da, *db, *dc;
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
  const int threads = 128;
  vector_add<<<(n + threads - 1) / threads, threads>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
  CHECK(cudaDeviceSynchronize());
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += c[i] != a[i] + b[i];
  printf("n=%d wrong=%d c[1]=%g c[n-1]=%g\n", n, wrong, c[1], c[n - 1]);
  // The inputs went to the device and back unchanged (checks the copy path on
  // any backend, also one whose kernels compute nothing).
  float* back = (float*)malloc(bytes);
  CHECK(cudaMemcpy(back, db, bytes, cudaMemcpyDeviceToHost));
  int copied = 0;
  for (int i = 0; i < n; ++i) copied += back[i] == b[i];
  printf("roundtrip=%d\n", copied);
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  int peer = -1;
  CHECK(cudaDeviceCanAccessPeer(&peer, 0, 0));
  printf("peer=%d\n", peer);
  CHECK(cudaDeviceReset());
  printf("done\n");
  return wrong != 0 ? 2 : 0;
}
