// CUDA graphs made by stream capture, replayed under tally:
//   - one capture over two streams (fork and join through events): an async copy
//     from pinned memory, kernels whose parameters are captured by value, an async
//     memset, a copy back into pinned memory and a host function;
//   - the graph launched three times, on another stream than it was captured on,
//     with new input written to the pinned buffer between launches (a copy node
//     reads its source when it runs, not when it was captured);
//   - capture status and id while capturing; what cannot be captured: a stream
//     synchronization invalidates the capture, the legacy stream cannot capture.
// Prints key=value lines the test checks.
#include <cstdio>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void scale_add(const int* in, int* out, int factor, int offset, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor + offset;
}

__global__ void add_from(int* data, const int* other, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += other[i];
}

static int g_host_calls = 0;
static void CUDART_CB count_call(void*) { ++g_host_calls; }

int main() {
  const int n = 1000, threads = 128, blocks = (n + threads - 1) / threads;
  const size_t bytes = n * sizeof(int);
  int *in_pinned, *out_pinned, *d_in, *d_a, *d_b;
  CHECK(cudaMallocHost(&in_pinned, bytes));
  CHECK(cudaMallocHost(&out_pinned, bytes));
  CHECK(cudaMalloc(&d_in, bytes));
  CHECK(cudaMalloc(&d_a, bytes));
  CHECK(cudaMalloc(&d_b, bytes));
  cudaStream_t s, side, other;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  // a = in * factor + 1 (main stream); b = 7 everywhere, then b = in * 3 + b... on the
  // side stream: b = in * 3 + 0, then a += b (main, after the join). out = a.
  int factor = 2;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status;
  unsigned long long capture_id = 0;
  CHECK(cudaStreamGetCaptureInfo(s, &status, &capture_id));
  printf("capturing=%d id_nonzero=%d\n", status == cudaStreamCaptureStatusActive, capture_id != 0);
  CHECK(cudaMemcpyAsync(d_in, in_pinned, bytes, cudaMemcpyHostToDevice, s));
  CHECK(cudaEventRecord(fork, s));
  CHECK(cudaStreamWaitEvent(side, fork, 0));
  CHECK(cudaStreamIsCapturing(side, &status));
  printf("side_joined=%d\n", status == cudaStreamCaptureStatusActive);
  CHECK(cudaMemsetAsync(d_b, 0, bytes, side));
  add_from<<<blocks, threads, 0, side>>>(d_b, d_in, n);       // b = in
  scale_add<<<blocks, threads, 0, s>>>(d_in, d_a, factor, 1, n);  // a = in * 2 + 1
  CHECK(cudaEventRecord(join, side));
  CHECK(cudaStreamWaitEvent(s, join, 0));
  add_from<<<blocks, threads, 0, s>>>(d_a, d_b, n);            // a = in * 3 + 1
  CHECK(cudaMemcpyAsync(out_pinned, d_a, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaLaunchHostFunc(s, count_call, nullptr));
  factor = 100;  // captured by value: the graph keeps 2
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaStreamIsCapturing(s, &status));
  printf("after_capture=%d host_calls_before_launch=%d\n", (int)status, g_host_calls);

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  int good = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) in_pinned[i] = i + round * 1000;
    CHECK(cudaGraphLaunch(exec, other));
    CHECK(cudaStreamSynchronize(other));
    int ok = 1;
    for (int i = 0; i < n; ++i) ok &= out_pinned[i] == (i + round * 1000) * 3 + 1;
    good += ok;
  }
  printf("rounds_good=%d host_calls=%d\n", good, g_host_calls);
  unsigned long long graph_memory = 1;
  CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &graph_memory));
  printf("graph_memory=%llu\n", graph_memory);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));

  // A synchronization inside a capture invalidates it.
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  scale_add<<<blocks, threads, 0, s>>>(d_in, d_a, 1, 0, n);
  cudaError_t sync = cudaStreamSynchronize(s);
  scale_add<<<blocks, threads, 0, s>>>(d_in, d_a, 1, 0, n);
  cudaError_t launch_after = cudaGetLastError();
  cudaGraph_t broken = nullptr;
  cudaError_t ended = cudaStreamEndCapture(s, &broken);
  printf("sync_in_capture=%d launch_after=%d end_invalidated=%d graph_null=%d\n", (int)sync, (int)launch_after,
         (int)ended, broken == nullptr);
  cudaGetLastError();
  cudaError_t legacy = cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal);
  printf("legacy_capture=%d\n", (int)legacy);
  cudaGetLastError();
  // Ordinary work still runs after all that.
  for (int i = 0; i < n; ++i) in_pinned[i] = i;
  CHECK(cudaMemcpyAsync(d_in, in_pinned, bytes, cudaMemcpyHostToDevice, s));
  scale_add<<<blocks, threads, 0, s>>>(d_in, d_a, 5, 0, n);
  CHECK(cudaMemcpyAsync(out_pinned, d_a, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  int after_ok = 1;
  for (int i = 0; i < n; ++i) after_ok &= out_pinned[i] == 5 * i;
  printf("after_ok=%d\n", after_ok);
  return 0;
}
