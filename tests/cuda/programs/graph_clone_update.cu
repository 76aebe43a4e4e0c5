// The CUDA graph calls people use with cloned graphs, through the runtime:
//   - a graph built node by node (copy in, memset, kernel, copy out, host node) is
//     cloned; both are launched and give the same results; the clone keeps its
//     parameters when the original's change; cudaGraphNodeFindInClone pairs nodes;
//   - a captured graph (two streams: fork and join) reports its nodes, their
//     types, roots and edges, and a captured kernel node's launch;
//   - cudaGraphExecUpdate takes new parameters (and a new kernel) from a graph
//     captured the same way, and refuses graphs whose topology or node types
//     differ, with the documented result and error nodes; the exec keeps working;
//   - cudaGraphDebugDotPrint writes the captured graph to argv[1] (the test reads it).
// Prints key=value lines the test checks.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

constexpr int kN = 2048;
constexpr int kThreads = 256;

__global__ void scale_add(const int* in, int* out, int factor, int offset, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor + offset;
}

__global__ void square_add(const int* in, int* out, int factor, int offset, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * in[i] * factor + offset;
}

__global__ void add_into(int* data, const int* other, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += other[i];
}

static int g_host_calls = 0;
static void CUDART_CB count_call(void*) { ++g_host_calls; }

struct Buffers {
  int *in_pinned, *out_pinned, *d_in, *d_a, *d_b;
};

// out[i] == expect(i) for every i.
template <class Expect>
static int all_equal(const int* out, Expect expect) {
  for (int i = 0; i < kN; ++i)
    if (out[i] != expect(i)) return 0;
  return 1;
}

// in -> d_in; d_a = 0 (memset); d_a = in * factor + 7; d_a -> out; host node.
static cudaGraph_t build_graph(const Buffers& b, int* factor, cudaGraphNode_t* kernel_node) {
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t copy_in, memset_node, copy_out, host;
  CHECK(cudaGraphAddMemcpyNode1D(&copy_in, g, nullptr, 0, b.d_in, b.in_pinned, kN * sizeof(int),
                                 cudaMemcpyHostToDevice));
  cudaMemsetParams ms = {};
  ms.dst = b.d_a, ms.value = 0, ms.elementSize = 4, ms.width = kN, ms.height = 1;
  CHECK(cudaGraphAddMemsetNode(&memset_node, g, nullptr, 0, &ms));
  int n = kN, offset = 7;
  int *in = b.d_in, *out = b.d_a;
  void* args[] = {&in, &out, factor, &offset, &n};
  cudaKernelNodeParams kp = {};
  kp.func = (void*)scale_add, kp.gridDim = dim3(kN / kThreads), kp.blockDim = dim3(kThreads), kp.kernelParams = args;
  cudaGraphNode_t deps[] = {copy_in, memset_node};
  CHECK(cudaGraphAddKernelNode(kernel_node, g, deps, 2, &kp));
  CHECK(cudaGraphAddMemcpyNode1D(&copy_out, g, kernel_node, 1, b.out_pinned, b.d_a, kN * sizeof(int),
                                 cudaMemcpyDeviceToHost));
  cudaHostNodeParams hp = {count_call, nullptr};
  CHECK(cudaGraphAddHostNode(&host, g, &copy_out, 1, &hp));
  return g;
}

// The same operations captured on two streams: in -> d_in; side stream: d_b = in * 3;
// main: d_a = in * factor + 1 (or square_add); join; d_a += d_b; d_a -> out. With
// `extra`, one more kernel at the end; with `memset_instead`, the first kernel on the
// main stream is a memset.
struct CaptureShape {
  int factor = 2;
  bool square = false;
  bool extra = false;
  bool memset_instead = false;
  bool no_join = false;
};

static cudaGraph_t capture_graph(const Buffers& b, cudaStream_t s, cudaStream_t side, const CaptureShape& shape) {
  cudaEvent_t fork, join;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  const int blocks = kN / kThreads;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemcpyAsync(b.d_in, b.in_pinned, kN * sizeof(int), cudaMemcpyHostToDevice, s));
  CHECK(cudaEventRecord(fork, s));
  CHECK(cudaStreamWaitEvent(side, fork, 0));
  scale_add<<<blocks, kThreads, 0, side>>>(b.d_in, b.d_b, 3, 0, kN);
  if (shape.memset_instead)
    CHECK(cudaMemsetAsync(b.d_a, 0, kN * sizeof(int), s));
  else if (shape.square)
    square_add<<<blocks, kThreads, 0, s>>>(b.d_in, b.d_a, shape.factor, 1, kN);
  else
    scale_add<<<blocks, kThreads, 0, s>>>(b.d_in, b.d_a, shape.factor, 1, kN);
  CHECK(cudaEventRecord(join, side));
  if (!shape.no_join) CHECK(cudaStreamWaitEvent(s, join, 0));
  add_into<<<blocks, kThreads, 0, s>>>(b.d_a, b.d_b, kN);
  if (shape.extra) add_into<<<blocks, kThreads, 0, s>>>(b.d_a, b.d_b, kN);
  CHECK(cudaMemcpyAsync(b.out_pinned, b.d_a, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
  if (shape.no_join) CHECK(cudaStreamWaitEvent(s, join, 0));  // the same nodes, the edge elsewhere
  cudaGraph_t g;
  CHECK(cudaStreamEndCapture(s, &g));
  return g;
}

static void fill_input(const Buffers& b, int round) {
  for (int i = 0; i < kN; ++i) b.in_pinned[i] = i + round;
}

static void clone_and_launch(const Buffers& b, cudaStream_t s) {
  int factor = 4;
  cudaGraphNode_t kernel_node;
  cudaGraph_t graph = build_graph(b, &factor, &kernel_node);
  cudaGraph_t clone;
  CHECK(cudaGraphClone(&clone, graph));
  size_t nodes = 0, clone_nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  CHECK(cudaGraphGetNodes(clone, nullptr, &clone_nodes));
  cudaGraphNode_t kernel_in_clone = nullptr;
  CHECK(cudaGraphNodeFindInClone(&kernel_in_clone, kernel_node, clone));
  cudaGraphNodeType clone_type;
  CHECK(cudaGraphNodeGetType(kernel_in_clone, &clone_type));
  printf("clone_nodes=%zu/%zu clone_node_differs=%d clone_kernel_type=%d\n", clone_nodes, nodes,
         kernel_in_clone != kernel_node, (int)clone_type);

  // The original's kernel now multiplies by 10; the clone keeps 4.
  cudaKernelNodeParams kp;
  CHECK(cudaGraphKernelNodeGetParams(kernel_node, &kp));
  int ten = 10;
  void* args[] = {kp.kernelParams[0], kp.kernelParams[1], &ten, kp.kernelParams[3], kp.kernelParams[4]};
  kp.kernelParams = args;
  CHECK(cudaGraphKernelNodeSetParams(kernel_node, &kp));

  cudaGraphExec_t exec, clone_exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphInstantiate(&clone_exec, clone, 0));
  fill_input(b, 0);
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  int original_ok = all_equal(b.out_pinned, [](int i) { return i * 10 + 7; });
  CHECK(cudaGraphLaunch(clone_exec, s));
  CHECK(cudaStreamSynchronize(s));
  int clone_ok = all_equal(b.out_pinned, [](int i) { return i * 4 + 7; });
  printf("original_ok=%d clone_ok=%d host_calls=%d\n", original_ok, clone_ok, g_host_calls);

  // A node added to the original after cloning has no copy in the clone.
  cudaGraphNode_t late;
  CHECK(cudaGraphAddEmptyNode(&late, graph, nullptr, 0));
  cudaGraphNode_t found = nullptr;
  printf("find_late=%d\n", (int)cudaGraphNodeFindInClone(&found, late, clone));
  cudaGetLastError();
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphExecDestroy(clone_exec));
  CHECK(cudaGraphDestroy(graph));
  // The clone outlives its original.
  CHECK(cudaGraphInstantiate(&clone_exec, clone, 0));
  fill_input(b, 1);
  CHECK(cudaGraphLaunch(clone_exec, s));
  CHECK(cudaStreamSynchronize(s));
  printf("clone_after_original_destroyed=%d\n", all_equal(b.out_pinned, [](int i) { return (i + 1) * 4 + 7; }));
  CHECK(cudaGraphExecDestroy(clone_exec));
  CHECK(cudaGraphDestroy(clone));
}

static void captured_shape(const Buffers& b, cudaStream_t s, cudaStream_t side, const char* dot_path) {
  cudaGraph_t g = capture_graph(b, s, side, CaptureShape{});
  size_t count = 0, roots = 0, edges = 0;
  CHECK(cudaGraphGetNodes(g, nullptr, &count));
  cudaGraphNode_t nodes[16];
  CHECK(cudaGraphGetNodes(g, nodes, &count));
  CHECK(cudaGraphGetRootNodes(g, nullptr, &roots));
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &edges));
  printf("captured_nodes=%zu roots=%zu edges=%zu types=", count, roots, edges);
  for (size_t i = 0; i < count; ++i) {
    cudaGraphNodeType t;
    CHECK(cudaGraphNodeGetType(nodes[i], &t));
    printf("%s%d", i ? "," : "", (int)t);
  }
  printf("\n");
  // The join kernel (node 3) waits for both branches.
  size_t join_deps = 0;
  CHECK(cudaGraphNodeGetDependencies(nodes[3], nullptr, nullptr, &join_deps));
  cudaKernelNodeParams kp;
  CHECK(cudaGraphKernelNodeGetParams(nodes[2], &kp));
  printf("join_deps=%zu captured_kernel_grid=%u captured_factor=%d\n", join_deps, kp.gridDim.x,
         *static_cast<int*>(kp.kernelParams[2]));
  CHECK(cudaGraphDebugDotPrint(g, dot_path, 0));
  printf("dot_written=1\n");
  cudaError_t unwritable = cudaGraphDebugDotPrint(g, "/nonexistent-dir/graph.dot", 0);
  cudaGetLastError();
  printf("dot_unwritable=%d\n", (int)unwritable);
  CHECK(cudaGraphDestroy(g));
}

static int try_update(cudaGraphExec_t exec, cudaGraph_t g, cudaGraphExecUpdateResultInfo* info) {
  cudaError_t e = cudaGraphExecUpdate(exec, g, info);
  cudaGetLastError();
  return (int)e;
}

static void update_exec(const Buffers& b, cudaStream_t s, cudaStream_t side) {
  cudaGraph_t first = capture_graph(b, s, side, CaptureShape{});
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, first, 0));
  fill_input(b, 0);
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  printf("before_update_ok=%d\n", all_equal(b.out_pinned, [](int i) { return i * 2 + 1 + i * 3; }));

  CaptureShape five;
  five.factor = 5;
  cudaGraph_t changed = capture_graph(b, s, side, five);
  cudaGraphExecUpdateResultInfo info;
  int rc = try_update(exec, changed, &info);
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  printf("update=%d result=%d updated_ok=%d\n", rc, (int)info.result,
         all_equal(b.out_pinned, [](int i) { return i * 5 + 1 + i * 3; }));

  CaptureShape square;
  square.square = true;
  square.factor = 2;
  cudaGraph_t new_kernel = capture_graph(b, s, side, square);
  rc = try_update(exec, new_kernel, &info);
  fill_input(b, 1);
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  printf("function_update=%d result=%d function_ok=%d\n", rc, (int)info.result,
         all_equal(b.out_pinned, [](int i) { return (i + 1) * (i + 1) * 2 + 1 + (i + 1) * 3; }));

  CaptureShape extra;
  extra.extra = true;
  cudaGraph_t bigger = capture_graph(b, s, side, extra);
  rc = try_update(exec, bigger, &info);
  printf("count_update=%d result=%d error_node_null=%d\n", rc, (int)info.result, info.errorNode == nullptr);

  CaptureShape memset_shape;
  memset_shape.memset_instead = true;
  cudaGraph_t retyped = capture_graph(b, s, side, memset_shape);
  rc = try_update(exec, retyped, &info);
  cudaGraphNode_t retyped_nodes[16];
  size_t count = 16;
  CHECK(cudaGraphGetNodes(retyped, retyped_nodes, &count));
  printf("type_update=%d result=%d error_node_is_memset=%d\n", rc, (int)info.result,
         info.errorNode == retyped_nodes[2]);

  CaptureShape moved_edge;
  moved_edge.no_join = true;
  cudaGraph_t rewired = capture_graph(b, s, side, moved_edge);
  rc = try_update(exec, rewired, &info);
  cudaGraphNode_t rewired_nodes[16];
  count = 16;
  CHECK(cudaGraphGetNodes(rewired, rewired_nodes, &count));
  printf("edge_update=%d result=%d error_node=%d\n", rc, (int)info.result,
         info.errorNode == rewired_nodes[3] ? 3 : info.errorNode == rewired_nodes[4] ? 4 : -1);

  // Refused updates changed nothing: the exec still runs the square kernel.
  fill_input(b, 2);
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  printf("after_refusals_ok=%d\n",
         all_equal(b.out_pinned, [](int i) { return (i + 2) * (i + 2) * 2 + 1 + (i + 2) * 3; }));
  for (cudaGraph_t g : {first, changed, new_kernel, bigger, retyped, rewired}) CHECK(cudaGraphDestroy(g));
  CHECK(cudaGraphExecDestroy(exec));
}

int main(int argc, char** argv) {
  if (argc < 2) {
    printf("usage: %s DOT_PATH\n", argv[0]);
    return 2;
  }
  Buffers b;
  CHECK(cudaMallocHost(&b.in_pinned, kN * sizeof(int)));
  CHECK(cudaMallocHost(&b.out_pinned, kN * sizeof(int)));
  CHECK(cudaMalloc(&b.d_in, kN * sizeof(int)));
  CHECK(cudaMalloc(&b.d_a, kN * sizeof(int)));
  CHECK(cudaMalloc(&b.d_b, kN * sizeof(int)));
  cudaStream_t s, side;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  clone_and_launch(b, s);
  captured_shape(b, s, side, argv[1]);
  update_exec(b, s, side);
  printf("done=1\n");
  return 0;
}
