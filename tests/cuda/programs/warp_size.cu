// warpSize in device code: nvcc turns it into the PTX operand WARP_SZ (as in
// NVIDIA's reduction and shfl_scan samples). Each warp sums its inputs with
// shuffles whose offsets and lane index come from warpSize.
#include <cstdio>
#include <vector>

#include "runtime_check.h"

__global__ void warp_sums(const int* in, int* sums, int* width) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[i];
  for (int offset = warpSize / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % warpSize == 0) sums[i / warpSize] = v;
  if (i == 0) *width = warpSize;
}

int main() {
  const int n = 4096, threads = 128;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = i % 97 - 13;
  int *d_in, *d_sums, *d_width;
  CHECK(cudaMalloc(&d_in, n * sizeof(int)));
  CHECK(cudaMalloc(&d_sums, n / 32 * sizeof(int)));
  CHECK(cudaMalloc(&d_width, sizeof(int)));
  CHECK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  warp_sums<<<n / threads, threads>>>(d_in, d_sums, d_width);
  CHECK(cudaGetLastError());
  std::vector<int> sums(n / 32);
  int width = 0;
  CHECK(cudaMemcpy(sums.data(), d_sums, sums.size() * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&width, d_width, sizeof(int), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int w = 0; w < n / 32; ++w) {
    int expect = 0;
    for (int k = 0; k < 32; ++k) expect += in[w * 32 + k];
    wrong += sums[w] != expect;
  }
  printf("warp_size=%d warps=%d wrong=%d first=%d\n", width, n / 32, wrong, sums[0]);
  return wrong == 0 ? 0 : 1;
}
