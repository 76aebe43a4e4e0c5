// A graph with host and event nodes the server keeps: wait(go) -> add(x, y) ->
// host node (counts its calls, in this process) -> twice(x) -> record(done), where
// `go` is recorded on another stream after a kernel sets y = 3, and `done` is what
// the host waits for. Each replay takes x to 2 * (x + 3). The server cuts each
// replay at its host and event nodes: the two kernels run as units of their own,
// the host function in the job between them. Prints key=value lines.
//   graph_host_event_replay [replays]
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void set(int* p, int v) { *p = v; }
__global__ void add(int* x, const int* y) { *x += *y; }
__global__ void twice(int* x) { *x *= 2; }

struct Calls {
  int count = 0;
};
static void CUDART_CB count_call(void* data) { ++static_cast<Calls*>(data)->count; }

int main(int argc, char** argv) {
  const int replays = argc > 1 ? atoi(argv[1]) : 3;
  int *x, *y;
  CHECK(cudaMalloc(&x, sizeof(int)));
  CHECK(cudaMalloc(&y, sizeof(int)));
  cudaStream_t s, other;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  cudaEvent_t go, done;
  CHECK(cudaEventCreateWithFlags(&go, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));

  Calls calls;
  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t wait, a, h, b, record;
  CHECK(cudaGraphAddEventWaitNode(&wait, g, nullptr, 0, go));
  cudaKernelNodeParams kp = {};
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(1);
  void* add_args[] = {&x, &y};
  kp.func = (void*)add;
  kp.kernelParams = add_args;
  CHECK(cudaGraphAddKernelNode(&a, g, &wait, 1, &kp));
  cudaHostNodeParams hp = {count_call, &calls};
  CHECK(cudaGraphAddHostNode(&h, g, &a, 1, &hp));
  void* twice_args[] = {&x};
  kp.func = (void*)twice;
  kp.kernelParams = twice_args;
  CHECK(cudaGraphAddKernelNode(&b, g, &h, 1, &kp));
  CHECK(cudaGraphAddEventRecordNode(&record, g, &b, 1, done));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));

  CHECK(cudaMemset(x, 0, sizeof(int)));
  CHECK(cudaMemset(y, 0, sizeof(int)));
  CHECK(cudaDeviceSynchronize());
  long long want = 0;
  for (int r = 0; r < replays; ++r) {
    set<<<1, 1, 0, other>>>(y, 3);
    CHECK(cudaEventRecord(go, other));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventSynchronize(done));
    want = 2 * (want + 3);
  }
  int got = 0;
  CHECK(cudaMemcpy(&got, x, sizeof got, cudaMemcpyDeviceToHost));
  CHECK(cudaStreamSynchronize(s));
  printf("x=%d want=%lld host_calls=%d\n", got, want, calls.count);
  printf("replays_ok=%d\n", got == want && calls.count == replays);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  return 0;
}
