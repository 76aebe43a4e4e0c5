// Conditional graph nodes (CUDA 12.3+; IF with an else body and SWITCH since 12.8),
// built with the explicit node API:
//   reset -> WHILE(count < limit){ step } -> pick -> SWITCH(count % 3){ mark 100 | 200 | 300 (captured) }
//                                              \-> IF(flag){ mark 1 } else { mark 2 }
//                                              -> IF(inner){ WHILE nested: bump until 3 }
// The loop's handle has a default of 1 assigned at each launch, so the body runs at
// least once; `limit` lives in device memory and changes between replays, so each
// replay's loop count is decided on the device. The IF's handle defaults to 0 and no
// kernel sets it: its else body runs. The nested WHILE's handle belongs to the IF's
// body. The SWITCH's third body is filled by stream capture into it
// (cudaStreamBeginCaptureToGraph). Prints key=value lines.        graph_conditional [replays]
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call) do { cudaError_t e = (call); if (e != cudaSuccess) { \
  printf("error %s -> %d\n", #call, (int)e); return 1; } } while (0)

__global__ void reset(int* count, int* bumps) { *count = 0; *bumps = 0; }
__global__ void step(cudaGraphConditionalHandle loop, int* count, int* trace, const int* limit) {
  const int c = (*count)++;
  trace[c] = c * c;
  cudaGraphSetConditional(loop, c + 1 < *limit ? 1 : 0);
}
__global__ void pick(cudaGraphConditionalHandle choice, const int* count) {
  cudaGraphSetConditional(choice, *count % 3);
}
__global__ void mark(int* out, int value) { *out = value; }
__global__ void arm(cudaGraphConditionalHandle inner) { cudaGraphSetConditional(inner, 1); }
__global__ void bump(cudaGraphConditionalHandle inner, int* bumps) {
  cudaGraphSetConditional(inner, ++*bumps < 3 ? 1 : 0);
}
__global__ void countdown(cudaGraphConditionalHandle h, int* n) { cudaGraphSetConditional(h, --*n > 0 ? 1 : 0); }

static cudaError_t add_kernel(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t n,
                              void* fn, void** args) {
  cudaKernelNodeParams kp = {};
  kp.func = fn;
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(1);
  kp.kernelParams = args;
  return cudaGraphAddKernelNode(node, graph, deps, n, &kp);
}

static cudaError_t add_conditional(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps, size_t n,
                                   cudaGraphConditionalHandle handle, cudaGraphConditionalNodeType type,
                                   unsigned size, cudaGraph_t** bodies) {
  cudaGraphNodeParams params = {};
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = handle;
  params.conditional.type = type;
  params.conditional.size = size;
  cudaError_t e = cudaGraphAddNode(node, graph, deps, nullptr, n, &params);
  *bodies = params.conditional.phGraph_out;
  return e;
}

int main(int argc, char** argv) {
  const int replays = argc > 1 ? atoi(argv[1]) : 3;
  int *count, *trace, *limit, *chosen, *flag, *bumps;
  CHECK(cudaMalloc(&count, sizeof(int)));
  CHECK(cudaMalloc(&trace, 64 * sizeof(int)));
  CHECK(cudaMalloc(&limit, sizeof(int)));
  CHECK(cudaMalloc(&chosen, sizeof(int)));
  CHECK(cudaMalloc(&flag, sizeof(int)));
  CHECK(cudaMalloc(&bumps, sizeof(int)));

  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle loop, choice, flag_handle;
  CHECK(cudaGraphConditionalHandleCreate(&loop, g, 1, cudaGraphCondAssignDefault));
  CHECK(cudaGraphConditionalHandleCreate(&choice, g, 0, 0));
  CHECK(cudaGraphConditionalHandleCreate(&flag_handle, g, 0, cudaGraphCondAssignDefault));

  cudaGraphNode_t n_reset, n_while, n_pick, n_switch, n_if;
  void* reset_args[] = {&count, &bumps};
  CHECK(add_kernel(&n_reset, g, nullptr, 0, (void*)reset, reset_args));
  cudaGraph_t* bodies;
  CHECK(add_conditional(&n_while, g, &n_reset, 1, loop, cudaGraphCondTypeWhile, 1, &bodies));
  cudaGraph_t loop_body = bodies[0];
  cudaGraphNode_t n_step;
  void* step_args[] = {&loop, &count, &trace, &limit};
  CHECK(add_kernel(&n_step, loop_body, nullptr, 0, (void*)step, step_args));

  void* pick_args[] = {&choice, &count};
  CHECK(add_kernel(&n_pick, g, &n_while, 1, (void*)pick, pick_args));
  CHECK(add_conditional(&n_switch, g, &n_pick, 1, choice, cudaGraphCondTypeSwitch, 3, &bodies));
  for (int k = 0; k < 2; ++k) {
    int value = 100 * (k + 1);
    void* mark_args[] = {&chosen, &value};
    cudaGraphNode_t n_mark;
    CHECK(add_kernel(&n_mark, bodies[k], nullptr, 0, (void*)mark, mark_args));
  }
  // the third body by stream capture into it
  cudaStream_t cs;
  CHECK(cudaStreamCreate(&cs));
  CHECK(cudaStreamBeginCaptureToGraph(cs, bodies[2], nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
  mark<<<1, 1, 0, cs>>>(chosen, 300);
  cudaGraph_t captured;
  CHECK(cudaStreamEndCapture(cs, &captured));
  printf("captured_into_body=%d\n", captured == bodies[2]);

  CHECK(add_conditional(&n_if, g, &n_pick, 1, flag_handle, cudaGraphCondTypeIf, 2, &bodies));
  cudaGraph_t then_body = bodies[0], else_body = bodies[1];
  int one = 1, two = 2;
  void* then_args[] = {&flag, &one};
  void* else_args[] = {&flag, &two};
  cudaGraphNode_t n_then, n_else;
  CHECK(add_kernel(&n_then, then_body, nullptr, 0, (void*)mark, then_args));
  CHECK(add_kernel(&n_else, else_body, nullptr, 0, (void*)mark, else_args));
  // a WHILE nested in the else body, with a handle of that body's own
  cudaGraphConditionalHandle inner;
  CHECK(cudaGraphConditionalHandleCreate(&inner, else_body, 0, 0));
  cudaGraphNode_t n_arm, n_inner;
  void* arm_args[] = {&inner};
  CHECK(add_kernel(&n_arm, else_body, &n_else, 1, (void*)arm, arm_args));
  CHECK(add_conditional(&n_inner, else_body, &n_arm, 1, inner, cudaGraphCondTypeWhile, 1, &bodies));
  void* bump_args[] = {&inner, &bumps};
  cudaGraphNode_t n_bump;
  CHECK(add_kernel(&n_bump, bodies[0], nullptr, 0, (void*)bump, bump_args));

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  int ok = 1;
  for (int r = 0; r < replays; ++r) {
    const int want = 1 + 2 * r;                 // 1, 3, 5, ... loop iterations (each SWITCH body in turn)
    CHECK(cudaMemcpy(limit, &want, sizeof want, cudaMemcpyHostToDevice));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    int got_count, got_trace[64], got_chosen, got_flag, got_bumps;
    CHECK(cudaMemcpy(&got_count, count, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(got_trace, trace, sizeof got_trace, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&got_chosen, chosen, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&got_flag, flag, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&got_bumps, bumps, sizeof(int), cudaMemcpyDeviceToHost));
    int trace_ok = 1;
    for (int i = 0; i < want; ++i) trace_ok &= got_trace[i] == i * i;
    printf("replay%d count=%d chosen=%d flag=%d bumps=%d trace_ok=%d\n", r, got_count, got_chosen, got_flag,
           got_bumps, trace_ok);
    ok &= got_count == want && trace_ok && got_chosen == 100 * (want % 3 + 1) && got_flag == 2 && got_bumps == 3;
  }
  printf("replays_ok=%d\n", ok);

  // A WHILE node added to a graph being captured (cudaStreamGetCaptureInfo's graph and
  // dependencies, cudaStreamUpdateCaptureDependencies after it), its body captured into
  // (cudaStreamEndCapture with no graph asked back): 6 -> 0 in six iterations, then
  // the kernel captured after the node marks the end.
  {
    cudaStream_t cap;
    CHECK(cudaStreamCreate(&cap));
    CHECK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus status;
    cudaGraph_t captured_graph;
    const cudaGraphNode_t* deps;
    size_t ndeps;
    CHECK(cudaStreamGetCaptureInfo(cap, &status, nullptr, &captured_graph, &deps, nullptr, &ndeps));
    cudaGraphConditionalHandle down;
    CHECK(cudaGraphConditionalHandleCreate(&down, captured_graph, 1, cudaGraphCondAssignDefault));
    int* n;
    CHECK(cudaMalloc(&n, sizeof(int)));
    mark<<<1, 1, 0, cap>>>(n, 6);
    CHECK(cudaStreamGetCaptureInfo(cap, &status, nullptr, &captured_graph, &deps, nullptr, &ndeps));
    cudaGraphNode_t n_down;
    CHECK(add_conditional(&n_down, captured_graph, deps, ndeps, down, cudaGraphCondTypeWhile, 1, &bodies));
    CHECK(cudaStreamUpdateCaptureDependencies(cap, &n_down, nullptr, 1, cudaStreamSetCaptureDependencies));
    mark<<<1, 1, 0, cap>>>(flag, 40);
    cudaGraph_t whole;
    CHECK(cudaStreamEndCapture(cap, &whole));
    cudaStream_t body_stream;
    CHECK(cudaStreamCreate(&body_stream));
    CHECK(cudaStreamBeginCaptureToGraph(body_stream, bodies[0], nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
    countdown<<<1, 1, 0, body_stream>>>(down, n);
    CHECK(cudaStreamEndCapture(body_stream, nullptr));
    cudaGraphExec_t whole_exec;
    CHECK(cudaGraphInstantiate(&whole_exec, whole, 0));
    CHECK(cudaGraphLaunch(whole_exec, cap));
    CHECK(cudaStreamSynchronize(cap));
    int left, end_mark;
    CHECK(cudaMemcpy(&left, n, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&end_mark, flag, sizeof(int), cudaMemcpyDeviceToHost));
    printf("captured_while_left=%d captured_end=%d\n", left, end_mark);
    CHECK(cudaGraphExecDestroy(whole_exec));
    CHECK(cudaGraphDestroy(whole));
  }

  // What CUDA refuses: a handle made for another graph, a WHILE with two bodies, a
  // graph with conditional nodes as a child graph or cloned.
  cudaGraph_t other;
  CHECK(cudaGraphCreate(&other, 0));
  cudaGraphNode_t refused;
  printf("foreign_handle=%d\n", (int)add_conditional(&refused, other, nullptr, 0, loop, cudaGraphCondTypeWhile, 1,
                                                     &bodies));
  cudaGraphConditionalHandle own;
  CHECK(cudaGraphConditionalHandleCreate(&own, other, 0, 0));
  printf("while_of_two=%d\n", (int)add_conditional(&refused, other, nullptr, 0, own, cudaGraphCondTypeWhile, 2,
                                                   &bodies));
  printf("as_child=%d\n", (int)cudaGraphAddChildGraphNode(&refused, other, nullptr, 0, g));
  cudaGraph_t clone;
  printf("clone=%d\n", (int)cudaGraphClone(&clone, g));
  CHECK(cudaGraphDestroy(other));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  printf("done\n");
  return 0;
}
