// Graph memory nodes under tally: allocations a stream capture makes from
// cudaMallocAsync/cudaFreeAsync, explicit cudaGraphAddMemAllocNode/MemFreeNode, an
// allocation the graph does not free (usable after the launch, freed by the job;
// relaunching before that fails), AUTO_FREE_ON_LAUNCH, and the graph-memory
// attributes. Prints key=value lines; "all correct" when every result matched.
//   graph_memory_nodes [bytes for one big allocation node, 0: skip]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define CHECK(call) do { cudaError_t e = (call); if (e != cudaSuccess) { \
  printf("error %s -> %d (%s)\n", #call, (int)e, cudaGetErrorName(e)); return 1; } } while (0)

static const int kN = 1000;

__global__ void fill(int* buf, int base) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kN; i += gridDim.x * blockDim.x) buf[i] = base + i;
}
__global__ void accumulate(int* out, const int* buf) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kN; i += gridDim.x * blockDim.x) out[i] += buf[i];
}

static int count_type(cudaGraph_t g, cudaGraphNodeType type) {
  size_t n = 0;
  cudaGraphGetNodes(g, nullptr, &n);
  cudaGraphNode_t nodes[64];
  if (n > 64) n = 64;
  cudaGraphGetNodes(g, nodes, &n);
  int count = 0;
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType t;
    cudaGraphNodeGetType(nodes[i], &t);
    count += t == type;
  }
  return count;
}

static int check_out(const int* dev, int want_base_sum, int launches, const char* what) {
  static int host[kN];
  cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
  for (int i = 0; i < kN; ++i) {
    if (host[i] != want_base_sum + launches * i) {
      printf("%s wrong at %d: %d, want %d\n", what, i, host[i], want_base_sum + launches * i);
      return 1;
    }
  }
  return 0;
}

static cudaMemAllocNodeParams alloc_params(size_t bytes) {
  cudaMemAllocNodeParams p = {};
  p.poolProps.allocType = cudaMemAllocationTypePinned;
  p.poolProps.location.type = cudaMemLocationTypeDevice;
  p.poolProps.location.id = 0;
  p.bytesize = bytes;
  return p;
}

int main(int argc, char** argv) {
  size_t big = argc > 1 ? strtoull(argv[1], nullptr, 10) : 0;
  int wrong = 0;
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  int* out;
  CHECK(cudaMalloc(&out, kN * sizeof(int)));

  // 1. Capture: cudaMallocAsync, two kernels, cudaFreeAsync.
  CHECK(cudaMemset(out, 0, kN * sizeof(int)));
  cudaGraph_t captured;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  int* scratch = nullptr;
  CHECK(cudaMallocAsync((void**)&scratch, kN * sizeof(int), s));
  fill<<<4, 128, 0, s>>>(scratch, 7);
  accumulate<<<4, 128, 0, s>>>(out, scratch);
  CHECK(cudaFreeAsync(scratch, s));
  CHECK(cudaStreamEndCapture(s, &captured));
  printf("captured_alloc_nodes=%d captured_free_nodes=%d\n", count_type(captured, cudaGraphNodeTypeMemAlloc),
         count_type(captured, cudaGraphNodeTypeMemFree));
  cudaGraphExec_t captured_exec;
  CHECK(cudaGraphInstantiate(&captured_exec, captured, 0));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(captured_exec, s));
  CHECK(cudaStreamSynchronize(s));
  wrong += check_out(out, 3 * 7, 3, "captured");

  // 2. Explicit nodes: alloc -> fill -> accumulate -> free.
  CHECK(cudaMemset(out, 0, kN * sizeof(int)));
  cudaGraph_t explicit_graph;
  CHECK(cudaGraphCreate(&explicit_graph, 0));
  cudaMemAllocNodeParams ap = alloc_params(kN * sizeof(int));
  cudaGraphNode_t alloc_node, fill_node, acc_node, free_node;
  CHECK(cudaGraphAddMemAllocNode(&alloc_node, explicit_graph, nullptr, 0, &ap));
  int* buf = (int*)ap.dptr;
  int base = 100;
  void* fill_args[] = {&buf, &base};
  cudaKernelNodeParams kp = {};
  kp.func = (void*)fill;
  kp.gridDim = dim3(4);
  kp.blockDim = dim3(128);
  kp.kernelParams = fill_args;
  CHECK(cudaGraphAddKernelNode(&fill_node, explicit_graph, &alloc_node, 1, &kp));
  void* acc_args[] = {&out, &buf};
  kp.func = (void*)accumulate;
  kp.kernelParams = acc_args;
  CHECK(cudaGraphAddKernelNode(&acc_node, explicit_graph, &fill_node, 1, &kp));
  CHECK(cudaGraphAddMemFreeNode(&free_node, explicit_graph, &acc_node, 1, ap.dptr));
  cudaMemAllocNodeParams got;
  CHECK(cudaGraphMemAllocNodeGetParams(alloc_node, &got));
  void* freed_ptr = nullptr;
  CHECK(cudaGraphMemFreeNodeGetParams(free_node, &freed_ptr));
  printf("alloc_params_kept=%d free_params_kept=%d\n", got.dptr == ap.dptr && got.bytesize == ap.bytesize,
         freed_ptr == ap.dptr);
  cudaGraphExec_t explicit_exec;
  CHECK(cudaGraphInstantiate(&explicit_exec, explicit_graph, 0));
  CHECK(cudaGraphLaunch(explicit_exec, s));
  CHECK(cudaGraphLaunch(explicit_exec, s));
  CHECK(cudaStreamSynchronize(s));
  wrong += check_out(out, 2 * 100, 2, "explicit");
  printf("free_outside_owning_graph=%d\n", (int)cudaFree(ap.dptr));   // freed in its graph: not the job's to free

  // 3. An allocation the graph does not free: usable after the launch until the job frees it.
  cudaGraph_t unfreed;
  CHECK(cudaGraphCreate(&unfreed, 0));
  cudaMemAllocNodeParams up = alloc_params(kN * sizeof(int));
  cudaGraphNode_t unfreed_alloc, unfreed_fill;
  CHECK(cudaGraphAddMemAllocNode(&unfreed_alloc, unfreed, nullptr, 0, &up));
  int* kept = (int*)up.dptr;
  base = 5;
  void* kept_args[] = {&kept, &base};
  kp.func = (void*)fill;
  kp.kernelParams = kept_args;
  CHECK(cudaGraphAddKernelNode(&unfreed_fill, unfreed, &unfreed_alloc, 1, &kp));
  cudaGraphExec_t unfreed_exec;
  CHECK(cudaGraphInstantiate(&unfreed_exec, unfreed, 0));
  CHECK(cudaGraphLaunch(unfreed_exec, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemset(out, 0, kN * sizeof(int)));
  accumulate<<<4, 128, 0, s>>>(out, kept);   // a stream operation after the graph reads its allocation
  CHECK(cudaStreamSynchronize(s));
  wrong += check_out(out, 5, 1, "unfreed");
  unsigned long long used = 0, reserved = 0;
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &used));
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
  printf("graph_mem_used=%llu graph_mem_reserved_at_least_used=%d\n", (unsigned long long)used, reserved >= used);
  printf("relaunch_unfreed=%d\n", (int)cudaGraphLaunch(unfreed_exec, s));
  cudaGetLastError();
  CHECK(cudaFreeAsync(kept, s));
  printf("double_free=%d\n", (int)cudaFreeAsync(kept, s));
  cudaGetLastError();
  printf("relaunch_after_free=%d\n", (int)cudaGraphLaunch(unfreed_exec, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaFree(kept));

  // 4. AUTO_FREE_ON_LAUNCH: each launch frees the previous one's allocation.
  cudaGraphExec_t auto_exec;
  CHECK(cudaGraphInstantiateWithFlags(&auto_exec, unfreed, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  CHECK(cudaGraphLaunch(auto_exec, s));
  CHECK(cudaGraphLaunch(auto_exec, s));
  CHECK(cudaStreamSynchronize(s));
  printf("auto_free_relaunch=ok\n");

  // 5. A free node naming memory no graph allocated; an allocation node over the quota.
  cudaGraphNode_t bad;
  printf("free_node_of_plain_memory=%d\n", (int)cudaGraphAddMemFreeNode(&bad, unfreed, nullptr, 0, out));
  cudaGetLastError();
  if (big) {
    cudaMemAllocNodeParams bp = alloc_params(big);
    printf("big_alloc_node=%d\n", (int)cudaGraphAddMemAllocNode(&bad, unfreed, nullptr, 0, &bp));
    cudaGetLastError();
  }

  CHECK(cudaGraphExecDestroy(captured_exec));
  CHECK(cudaGraphExecDestroy(explicit_exec));
  CHECK(cudaGraphExecDestroy(unfreed_exec));
  CHECK(cudaGraphExecDestroy(auto_exec));
  CHECK(cudaGraphDestroy(captured));
  CHECK(cudaGraphDestroy(explicit_graph));
  CHECK(cudaGraphDestroy(unfreed));
  // Destroyed execs give their memory back once their launches are done (in the background).
  for (int i = 0; i < 500; ++i) {
    CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &reserved));
    if (reserved == 0) break;
    usleep(10000);
  }
  printf("graph_mem_reserved_after_destroy=%llu\n", (unsigned long long)reserved);
  printf(wrong ? "results wrong\n" : "all correct\n");
  return wrong != 0;
}
