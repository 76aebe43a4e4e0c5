// A captured graph of kernels only (a fork across two streams and a join), which
// tally's server keeps: each replay is one message. Replayed `replays` times,
// checked against the host's reference; then one kernel node's parameters are
// changed on the instantiated graph (the client replays it from then on) and the
// graph replayed once more. Prints key=value lines the test checks.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void affine(int* x, int a, int b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * a + b;
}

__global__ void combine(int* out, const int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += 2 * p[i];
}

int main(int argc, char** argv) {
  const int replays = argc > 1 ? atoi(argv[1]) : 10, n = 256, threads = 64, blocks = n / threads;
  int *x, *y;
  CHECK(cudaMalloc(&x, n * sizeof(int)));
  CHECK(cudaMalloc(&y, n * sizeof(int)));
  std::vector<int> hx(n), hy(n), got(n);
  for (int i = 0; i < n; ++i) hx[i] = i % 7, hy[i] = 1;
  CHECK(cudaMemcpy(x, hx.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(y, hy.data(), n * sizeof(int), cudaMemcpyHostToDevice));

  cudaStream_t s, side;
  cudaEvent_t fork, join;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  affine<<<blocks, threads, 0, s>>>(x, 2, 1, n);          // x = 2x + 1
  CHECK(cudaEventRecord(fork, s));
  CHECK(cudaStreamWaitEvent(side, fork, 0));
  affine<<<blocks, threads, 0, side>>>(y, 3, 0, n);       // y = 3y      (side branch)
  affine<<<blocks, threads, 0, s>>>(x, 1, 5, n);          // x = x + 5   (main branch)
  CHECK(cudaEventRecord(join, side));
  CHECK(cudaStreamWaitEvent(s, join, 0));
  combine<<<blocks, threads, 0, s>>>(x, y, n);            // x += 2y     (join)
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));

  // Values stay small: x and y are reset to the same start before each replay.
  std::vector<int> x0(hx), y0(hy);
  int ok = 1;
  for (int r = 0; r < replays; ++r) {
    CHECK(cudaMemcpyAsync(x, x0.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(y, y0.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaMemcpyAsync(got.data(), x, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; ++i) ok &= got[i] == (2 * x0[i] + 1) + 5 + 2 * (3 * y0[i]);
  }
  printf("replays_ok=%d\n", ok);

  // Change the first kernel node (x = 2x + 1 -> x = 2x + 9) on the instantiated graph.
  size_t count = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  int updated = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaKernelNodeParams p;
    CHECK(cudaGraphKernelNodeGetParams(node, &p));
    if (p.func == (void*)affine && *static_cast<int*>(p.kernelParams[1]) == 2) {
      int a = 2, b = 9;
      void* args[] = {&x, &a, &b, (void*)&n};
      p.kernelParams = args;
      CHECK(cudaGraphExecKernelNodeSetParams(exec, node, &p));
      updated = 1;
      break;
    }
  }
  CHECK(cudaMemcpyAsync(x, x0.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(y, y0.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaMemcpyAsync(got.data(), x, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  int update_ok = updated;
  for (int i = 0; i < n; ++i) update_ok &= got[i] == (2 * x0[i] + 9) + 5 + 2 * (3 * y0[i]);
  printf("update_ok=%d\n", update_ok);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  printf("nodes=%zu\n", count);
  return 0;
}
