// cudaGraphNodeSetEnabled / GetEnabled on an instantiated graph of two kernel nodes
// and a memset node (x += 1; y = 7; x += 10): disabling a node makes it an empty one
// from the next launch, enabling it brings it back, and the graph it came from is not
// changed. With the argument "client" the graph also has a copy from pageable host
// memory (so the client replays it instead of the server). Prints key=value lines.
//   graph_node_enable [client]
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call) do { cudaError_t e = (call); if (e != cudaSuccess) { \
  printf("error %s -> %d\n", #call, (int)e); return 1; } } while (0)

__global__ void add(int* x, int v) { *x += v; }

int main(int argc, char** argv) {
  const bool client = argc > 1 && !strcmp(argv[1], "client");
  int *x, *y;
  CHECK(cudaMalloc(&x, sizeof(int)));
  CHECK(cudaMalloc(&y, sizeof(int)));
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  int one = 1, ten = 10;
  void* args1[] = {&x, &one};
  void* args10[] = {&x, &ten};
  cudaKernelNodeParams kp = {};
  kp.func = (void*)add;
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(1);
  kp.kernelParams = args1;
  cudaGraphNode_t a, m, b, empty, h;
  CHECK(cudaGraphAddKernelNode(&a, g, nullptr, 0, &kp));
  cudaMemsetParams mp = {};
  mp.dst = y;
  mp.value = 7;
  mp.elementSize = 4;
  mp.width = 1;
  mp.height = 1;
  CHECK(cudaGraphAddMemsetNode(&m, g, &a, 1, &mp));
  kp.kernelParams = args10;
  CHECK(cudaGraphAddKernelNode(&b, g, &m, 1, &kp));
  CHECK(cudaGraphAddEmptyNode(&empty, g, &b, 1));
  static int from_host = 5;
  int* scratch = nullptr;
  if (client) {
    CHECK(cudaMalloc(&scratch, sizeof(int)));
    CHECK(cudaGraphAddMemcpyNode1D(&h, g, &empty, 1, scratch, &from_host, sizeof(int), cudaMemcpyHostToDevice));
  }
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));

  auto run = [&](int* xv, int* yv) -> int {
    CHECK(cudaMemset(x, 0, sizeof(int)));
    CHECK(cudaMemset(y, 0, sizeof(int)));
    CHECK(cudaGraphLaunch(exec, 0));
    CHECK(cudaMemcpy(xv, x, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(yv, y, sizeof(int), cudaMemcpyDeviceToHost));
    return 0;
  };
  int xv, yv;
  unsigned enabled = 9;
  if (run(&xv, &yv)) return 1;
  printf("all_x=%d all_y=%d\n", xv, yv);
  CHECK(cudaGraphNodeSetEnabled(exec, b, 0));
  CHECK(cudaGraphNodeSetEnabled(exec, m, 0));
  CHECK(cudaGraphNodeGetEnabled(exec, b, &enabled));
  printf("b_enabled=%u\n", enabled);
  if (run(&xv, &yv)) return 1;
  printf("disabled_x=%d disabled_y=%d\n", xv, yv);
  CHECK(cudaGraphNodeSetEnabled(exec, m, 1));
  if (run(&xv, &yv)) return 1;
  printf("memset_back_x=%d memset_back_y=%d\n", xv, yv);
  CHECK(cudaGraphNodeSetEnabled(exec, b, 1));
  CHECK(cudaGraphNodeGetEnabled(exec, b, &enabled));
  if (run(&xv, &yv)) return 1;
  printf("enabled_again=%u again_x=%d again_y=%d\n", enabled, xv, yv);
  printf("empty_node=%d\n", (int)cudaGraphNodeSetEnabled(exec, empty, 0));
  cudaGetLastError();
  // an exec update of a kernel node, then a disabled memset: the graph is defined again
  // with the kernel's new parameters, not the ones it was instantiated with
  int hundred = 100;
  void* args100[] = {&x, &hundred};
  kp.func = (void*)add;
  kp.kernelParams = args100;
  CHECK(cudaGraphExecKernelNodeSetParams(exec, a, &kp));
  CHECK(cudaGraphNodeSetEnabled(exec, m, 0));
  if (run(&xv, &yv)) return 1;
  printf("updated_x=%d updated_y=%d\n", xv, yv);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  printf("done\n");
  return 0;
}
