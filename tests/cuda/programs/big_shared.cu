// A kernel whose dynamic shared memory is over the default 48 KiB per block, as
// cuDNN's and cuBLAS's are: the program opts in with cudaFuncSetAttribute, as CUDA
// requires, then checks each block's sum. Refused before the opt-in, as a driver refuses.
#include <cstdio>
#include "runtime_check.h"

constexpr int kSharedBytes = 100 * 1024;
constexpr int kFloats = kSharedBytes / sizeof(float);

__global__ void block_sums(const float* in, float* out) {
  extern __shared__ float tile[];
  for (int i = threadIdx.x; i < kFloats; i += blockDim.x) tile[i] = in[blockIdx.x * kFloats + i];
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0;
    for (int i = 0; i < kFloats; ++i) sum += tile[i];
    out[blockIdx.x] = sum;
  }
}

int main() {
  const int blocks = 64;
  float *in, *out;
  CHECK(cudaMalloc(&in, size_t(blocks) * kSharedBytes));
  CHECK(cudaMalloc(&out, blocks * sizeof(float)));
  float* host = new float[size_t(blocks) * kFloats];
  for (int b = 0; b < blocks; ++b)
    for (int i = 0; i < kFloats; ++i) host[size_t(b) * kFloats + i] = float((b + i) % 4);
  CHECK(cudaMemcpy(in, host, size_t(blocks) * kSharedBytes, cudaMemcpyHostToDevice));

  block_sums<<<blocks, 256, kSharedBytes>>>(in, out);
  const cudaError_t before_opt_in = cudaGetLastError();
  CHECK(cudaFuncSetAttribute(block_sums, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
  for (int round = 0; round < 3; ++round) block_sums<<<blocks, 256, kSharedBytes>>>(in, out);
  CHECK(cudaGetLastError());
  float sums[blocks];
  CHECK(cudaMemcpy(sums, out, sizeof(sums), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int b = 0; b < blocks; ++b) {
    float want = 0;
    for (int i = 0; i < kFloats; ++i) want += float((b + i) % 4);
    wrong += sums[b] != want;
  }
  printf("refused_before_opt_in=%d\nwrong_blocks=%d\n", before_opt_in == cudaErrorInvalidValue, wrong);
  return 0;
}
