// A CUDA graph built node by node through the runtime (cudaGraphCreate,
// cudaGraphAdd*Node, cudaGraphAddDependencies): a memset, a kernel, two kernels
// that depend on it side by side, a kernel that joins them (its edges added after
// the nodes, so the order of adding is not an order of running), a copy to pinned
// memory and a host node that checks it. Launched twice, then with one kernel's
// parameters changed in the instantiated graph only; a child graph and a node
// added through cudaGraphAddNode; the graph's shape read back; what must fail.
// Prints key=value lines the test checks.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void fill(int* a, int factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += i * factor;  // the memset before it must have run: a starts at 0
}

__global__ void plus_one(const int* a, int* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i] + 1;
}

__global__ void twice(const int* a, int* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] * 2;
}

__global__ void join(const int* b, const int* c, int* d, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d[i] = b[i] + c[i];
}

constexpr int kN = 4096;

struct HostCheck {
  const int* result;  // pinned
  int factor;
  int calls;
  int good;
};

// d[i] = (i*f + 1) + 2*i*f = 3*i*f + 1, checked on the host when the graph reaches this node.
static void CUDART_CB check_result(void* arg) {
  auto* h = static_cast<HostCheck*>(arg);
  int ok = 1;
  for (int i = 0; i < kN; ++i) ok &= h->result[i] == 3 * i * h->factor + 1;
  h->calls += 1;
  h->good += ok;
}

static cudaKernelNodeParams kernel(void* func, void** args) {
  cudaKernelNodeParams p = {};
  p.func = func;
  p.gridDim = dim3(kN / 256);
  p.blockDim = dim3(256);
  p.kernelParams = args;
  return p;
}

int main() {
  int *a, *b, *c, *d, *host;
  CHECK(cudaMalloc(&a, kN * sizeof(int)));
  CHECK(cudaMalloc(&b, kN * sizeof(int)));
  CHECK(cudaMalloc(&c, kN * sizeof(int)));
  CHECK(cudaMalloc(&d, kN * sizeof(int)));
  CHECK(cudaMallocHost(&host, kN * sizeof(int)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  int n = kN, factor = 3;
  HostCheck check = {host, factor, 0, 0};

  cudaGraphNode_t clear, first, joined, left, right, copy, verify;
  cudaMemsetParams ms = {};
  ms.dst = a, ms.value = 0, ms.elementSize = 4, ms.width = kN, ms.height = 1;
  CHECK(cudaGraphAddMemsetNode(&clear, graph, nullptr, 0, &ms));
  void* fill_args[] = {&a, &factor, &n};
  cudaKernelNodeParams kp = kernel((void*)fill, fill_args);
  CHECK(cudaGraphAddKernelNode(&first, graph, &clear, 1, &kp));
  factor = 1000;  // node parameters were copied when the node was added
  void* join_args[] = {&b, &c, &d, &n};
  kp = kernel((void*)join, join_args);
  CHECK(cudaGraphAddKernelNode(&joined, graph, nullptr, 0, &kp));  // edges come later
  void* left_args[] = {&a, &b, &n};
  kp = kernel((void*)plus_one, left_args);
  CHECK(cudaGraphAddKernelNode(&left, graph, &first, 1, &kp));
  void* right_args[] = {&a, &c, &n};
  kp = kernel((void*)twice, right_args);
  CHECK(cudaGraphAddKernelNode(&right, graph, &first, 1, &kp));
  cudaGraphNode_t from[] = {left, right}, to[] = {joined, joined};
  CHECK(cudaGraphAddDependencies(graph, from, to, nullptr, 2));
  CHECK(cudaGraphAddMemcpyNode1D(&copy, graph, &joined, 1, host, d, kN * sizeof(int), cudaMemcpyDeviceToHost));
  cudaHostNodeParams hp = {check_result, &check};
  CHECK(cudaGraphAddHostNode(&verify, graph, &copy, 1, &hp));

  size_t count = 0, roots = 0, deps = 0, dependents = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  CHECK(cudaGraphGetRootNodes(graph, nullptr, &roots));
  CHECK(cudaGraphNodeGetDependencies(joined, nullptr, nullptr, &deps));
  CHECK(cudaGraphNodeGetDependentNodes(first, nullptr, nullptr, &dependents));
  cudaGraphNodeType type;
  CHECK(cudaGraphNodeGetType(copy, &type));
  printf("nodes=%zu roots=%zu join_deps=%zu first_dependents=%zu copy_type=%d\n", count, roots, deps, dependents,
         (int)type);

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaGraphLaunch(exec, stream));  // the memset node clears `a` again: same result
  CHECK(cudaStreamSynchronize(stream));
  printf("host_calls=%d host_good=%d d_last=%d\n", check.calls, check.good, host[kN - 1]);

  // New parameters for one kernel, in the instantiated graph only.
  int new_factor = 5;
  void* new_args[] = {&a, &new_factor, &n};
  kp = kernel((void*)fill, new_args);
  CHECK(cudaGraphExecKernelNodeSetParams(exec, first, &kp));
  check.factor = 5;
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  cudaKernelNodeParams got = {};
  CHECK(cudaGraphKernelNodeGetParams(first, &got));
  printf("updated_good=%d graph_keeps_factor=%d\n", check.good, *(int*)got.kernelParams[1]);

  // A child graph (a kernel) inside another graph, after a node made by cudaGraphAddNode.
  cudaGraph_t child, outer;
  CHECK(cudaGraphCreate(&child, 0));
  cudaGraphNode_t inner, outer_first, outer_child;
  void* child_args[] = {&b, &c, &n};
  kp = kernel((void*)plus_one, child_args);  // c = b + 1
  CHECK(cudaGraphAddKernelNode(&inner, child, nullptr, 0, &kp));
  CHECK(cudaGraphCreate(&outer, 0));
  cudaGraphNodeParams generic = {};
  generic.type = cudaGraphNodeTypeMemset;
  generic.memset.dst = b, generic.memset.value = 41, generic.memset.elementSize = 4, generic.memset.width = kN;
  generic.memset.height = 1;
  CHECK(cudaGraphAddNode(&outer_first, outer, nullptr, nullptr, 0, &generic));
  CHECK(cudaGraphAddChildGraphNode(&outer_child, outer, &outer_first, 1, child));
  cudaGraphExec_t outer_exec;
  CHECK(cudaGraphInstantiate(&outer_exec, outer, 0));
  CHECK(cudaGraphLaunch(outer_exec, stream));
  CHECK(cudaMemcpyAsync(host, c, kN * sizeof(int), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  printf("child_c0=%d child_c_last=%d\n", host[0], host[kN - 1]);

  // What must fail: a cycle (found when instantiating), an edge to another graph's node.
  CHECK(cudaGraphAddDependencies(graph, &verify, &clear, nullptr, 1));
  cudaGraphExec_t bad;
  printf("cycle=%d\n", (int)cudaGraphInstantiate(&bad, graph, 0));
  cudaGetLastError();
  printf("foreign_edge=%d\n", (int)cudaGraphAddDependencies(graph, &inner, &clear, nullptr, 1));
  cudaGetLastError();

  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphExecDestroy(outer_exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaGraphDestroy(child));
  CHECK(cudaGraphDestroy(outer));
  CHECK(cudaFreeHost(host));
  printf("done=1\n");
  return 0;
}
