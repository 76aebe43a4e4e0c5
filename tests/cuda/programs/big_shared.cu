// A kernel whose dynamic shared memory is over the default 48 KiB per block, as
// cuDNN's and cuBLAS's are: the program opts in with cudaFuncSetAttribute, as CUDA
// requires, then checks each block's sum. Refused before the opt-in, as a driver refuses.
#include <cstdio>
#include <string>
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

int main(int argc, char** argv) {
  // `graph`: opt in, then only the graph replays
  const bool graph_only = argc > 1 && std::string(argv[1]) == "graph";
  const int blocks = 64;
  float *in, *out;
  CHECK(cudaMalloc(&in, size_t(blocks) * kSharedBytes));
  CHECK(cudaMalloc(&out, blocks * sizeof(float)));
  float* host = new float[size_t(blocks) * kFloats];
  for (int b = 0; b < blocks; ++b)
    for (int i = 0; i < kFloats; ++i) host[size_t(b) * kFloats + i] = float((b + i) % 4);
  CHECK(cudaMemcpy(in, host, size_t(blocks) * kSharedBytes, cudaMemcpyHostToDevice));

  cudaError_t before_opt_in = cudaErrorInvalidValue;
  if (!graph_only) {
    block_sums<<<blocks, 256, kSharedBytes>>>(in, out);
    before_opt_in = cudaGetLastError();
  }
  CHECK(cudaFuncSetAttribute(block_sums, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
  float sums[blocks];
  int wrong = 0;
  if (!graph_only) {
    for (int round = 0; round < 3; ++round) block_sums<<<blocks, 256, kSharedBytes>>>(in, out);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(sums, out, sizeof(sums), cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; ++b) {
      float want = 0;
      for (int i = 0; i < kFloats; ++i) want += float((b + i) % 4);
      wrong += sums[b] != want;
    }
  }
  // The same launch replayed from a CUDA graph (PyTorch's CUDA-graph serving path).
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  block_sums<<<blocks, 256, kSharedBytes, stream>>>(in, out);
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  int graph_wrong = 0;
  char first_wrong[128] = "none";   // round:block:got:want of the first wrong sum, for whoever reads a failure
  for (int round = 0; round < 2; ++round) {
    CHECK(cudaMemsetAsync(out, 0, blocks * sizeof(float), stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaMemcpyAsync(sums, out, sizeof(sums), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    for (int b = 0; b < blocks; ++b) {
      float want = 0;
      for (int i = 0; i < kFloats; ++i) want += float((b + i) % 4);
      if (sums[b] != want && graph_wrong++ == 0)
        snprintf(first_wrong, sizeof first_wrong, "%d:%d:%.0f:%.0f", round, b, sums[b], want);
    }
  }
  printf("refused_before_opt_in=%d\nwrong_blocks=%d\ngraph_wrong_blocks=%d\ngraph_first_wrong=%s\n",
         before_opt_in == cudaErrorInvalidValue, wrong, graph_wrong, first_wrong);
  return 0;
}
