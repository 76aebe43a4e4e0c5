// A captured graph of memsets, kernels and a device-to-device copy, as PyTorch's
// captures have them (cudaMemsetAsync zeroing a buffer before kernels accumulate
// into it, a copy_ into an output tensor), which tally's server keeps and replays
// as one unit: zero acc, acc += x (twice, on a second stream forked from the
// first), set acc's last quarter to 0x01010101 bytes with a 1-byte memset,
// acc *= 3, out = acc. Replayed `replays` times with x changed between
// replays, each result checked. Prints key=value lines the test checks.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void accumulate(int* acc, const int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&acc[i], x[i]);
}

__global__ void triple(int* acc, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) acc[i] *= 3;
}

int main(int argc, char** argv) {
  const int replays = argc > 1 ? atoi(argv[1]) : 4, n = 256, threads = 64, blocks = n / threads, q = n / 4;
  int *acc, *x, *out;
  CHECK(cudaMalloc(&acc, n * sizeof(int)));
  CHECK(cudaMalloc(&out, n * sizeof(int)));
  CHECK(cudaMalloc(&x, n * sizeof(int)));
  cudaStream_t s, side;
  cudaEvent_t fork, join;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemsetAsync(acc, 0, n * sizeof(int), s));
  CHECK(cudaEventRecord(fork, s));
  CHECK(cudaStreamWaitEvent(side, fork, 0));
  accumulate<<<blocks, threads, 0, s>>>(acc, x, n);
  accumulate<<<blocks, threads, 0, side>>>(acc, x, n);
  CHECK(cudaEventRecord(join, side));
  CHECK(cudaStreamWaitEvent(s, join, 0));
  CHECK(cudaMemsetAsync(acc + n - q, 1, q * sizeof(int), s));
  triple<<<blocks, threads, 0, s>>>(acc, n);
  CHECK(cudaMemcpyAsync(out, acc, n * sizeof(int), cudaMemcpyDeviceToDevice, s));
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));

  std::vector<int> hx(n), got(n);
  int ok = 1;
  for (int r = 0; r < replays; ++r) {
    for (int i = 0; i < n; ++i) hx[i] = (i * 7 + r) % 11;
    CHECK(cudaMemcpyAsync(x, hx.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemsetAsync(out, 0, n * sizeof(int), s));      // the replay's copy must fill it again
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(got.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; ++i) ok &= got[i] == 3 * (i < n - q ? 2 * hx[i] : 0x01010101);
  }
  size_t count = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  printf("replays_ok=%d nodes=%zu\n", ok, count);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return 0;
}
