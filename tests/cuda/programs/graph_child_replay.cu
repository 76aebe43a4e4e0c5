// Child graphs in a graph the server keeps: parent = scale(x2) -> child -> add(+1),
// child = {add(+3) and add(+5) side by side} -> grandchild, grandchild = scale(x3).
// The server gets the graph once, flattened (each child's nodes between an empty node
// for its start and one for its end), and replays it as one unit. Every element
// goes v -> ((2v + 8) * 3) + 1 per replay. Prints key=value lines.
//   graph_child_replay [replays]
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#include "runtime_check.h"

constexpr int kN = 128;

__global__ void scale(int* v, int by) { v[threadIdx.x] *= by; }
__global__ void add(int* v, int by) { atomicAdd(&v[threadIdx.x], by); }

static void add_kernel(cudaGraph_t g, cudaGraphNode_t* node, const cudaGraphNode_t* deps, size_t n, void* fn,
                       int* v, int by) {
  void* args[] = {&v, &by};
  cudaKernelNodeParams kp = {};
  kp.func = fn;
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(kN);
  kp.kernelParams = args;
  if (cudaGraphAddKernelNode(node, g, deps, n, &kp) != cudaSuccess) {
    printf("error adding a kernel node\n");
    exit(1);
  }
}

int main(int argc, char** argv) {
  const int replays = argc > 1 ? atoi(argv[1]) : 3;
  int* v;
  CHECK(cudaMalloc(&v, kN * sizeof(int)));
  cudaGraph_t grandchild, child, parent;
  CHECK(cudaGraphCreate(&grandchild, 0));
  cudaGraphNode_t n;
  add_kernel(grandchild, &n, nullptr, 0, (void*)scale, v, 3);
  CHECK(cudaGraphCreate(&child, 0));
  cudaGraphNode_t plus3, plus5, grand;
  add_kernel(child, &plus3, nullptr, 0, (void*)add, v, 3);
  add_kernel(child, &plus5, nullptr, 0, (void*)add, v, 5);
  cudaGraphNode_t both[] = {plus3, plus5};
  CHECK(cudaGraphAddChildGraphNode(&grand, child, both, 2, grandchild));
  CHECK(cudaGraphCreate(&parent, 0));
  cudaGraphNode_t twice, sub, plus1;
  add_kernel(parent, &twice, nullptr, 0, (void*)scale, v, 2);
  CHECK(cudaGraphAddChildGraphNode(&sub, parent, &twice, 1, child));
  add_kernel(parent, &plus1, &sub, 1, (void*)add, v, 1);
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, parent, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));

  std::vector<long long> want(kN);
  std::vector<int> init(kN), got(kN);
  for (int i = 0; i < kN; ++i) want[i] = init[i] = i % 7;
  CHECK(cudaMemcpy(v, init.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
  for (int r = 0; r < replays; ++r) {
    CHECK(cudaGraphLaunch(exec, s));
    for (auto& w : want) w = (2 * w + 8) * 3 + 1;
  }
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(got.data(), v, kN * sizeof(int), cudaMemcpyDeviceToHost));
  int ok = 1;
  for (int i = 0; i < kN; ++i) ok &= got[i] == static_cast<int>(want[i]);
  size_t count = 0;
  CHECK(cudaGraphGetNodes(parent, nullptr, &count));
  printf("replays_ok=%d nodes=%zu\n", ok, count);

  // the instantiated child node takes a new child of the same shape (+1 and +2 side by
  // side, then the grandchild): v -> (2v + 3) * 3 + 1 from the next replay
  cudaGraph_t other;
  CHECK(cudaGraphCreate(&other, 0));
  cudaGraphNode_t p1, p2, g2;
  add_kernel(other, &p1, nullptr, 0, (void*)add, v, 1);
  add_kernel(other, &p2, nullptr, 0, (void*)add, v, 2);
  cudaGraphNode_t pair[] = {p1, p2};
  CHECK(cudaGraphAddChildGraphNode(&g2, other, pair, 2, grandchild));
  CHECK(cudaGraphExecChildGraphNodeSetParams(exec, sub, other));
  CHECK(cudaGraphDestroy(other));            // the exec runs its own copy
  CHECK(cudaGraphLaunch(exec, s));
  for (auto& w : want) w = (2 * w + 3) * 3 + 1;
  // a child of another shape is refused
  cudaGraph_t lone;
  CHECK(cudaGraphCreate(&lone, 0));
  add_kernel(lone, &p1, nullptr, 0, (void*)add, v, 1);
  printf("other_shape=%d\n", (int)cudaGraphExecChildGraphNodeSetParams(exec, sub, lone));
  cudaGetLastError();
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(got.data(), v, kN * sizeof(int), cudaMemcpyDeviceToHost));
  ok = 1;
  for (int i = 0; i < kN; ++i) ok &= got[i] == static_cast<int>(want[i]);
  printf("new_child_ok=%d\n", ok);
  CHECK(cudaGraphExecDestroy(exec));
  return 0;
}
