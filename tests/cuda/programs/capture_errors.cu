// Stream capture's rules, as CUDA enforces them (CuPy's test_graph checks these):
//   - implicit: while a blocking stream is captured, asking whether the legacy stream is
//     capturing fails (cudaErrorStreamCaptureImplicit) and spoils nothing; work on the
//     legacy stream fails so and invalidates the capture;
//   - unmatched: ending the capture on a stream that joined it, not the one that began
//     it, fails and invalidates the capture;
//   - unjoined: a stream forked into the capture and not joined back fails the end;
//   - a fork joined back ends fine and its graph runs.
// After each, the streams have left capture mode and work as usual.
// Prints key=value lines the test checks.
#include <cstdio>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void add(int* x, int v) { atomicAdd(x, v); }

static int capturing(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t rc = cudaStreamIsCapturing(s, &status);
  return rc != cudaSuccess ? -static_cast<int>(rc) : static_cast<int>(status);
}

int main() {
  int* x;
  CHECK(cudaMalloc(&x, sizeof(int)));
  CHECK(cudaMemset(x, 0, sizeof(int)));
  cudaStream_t blocking, s1, s2;
  CHECK(cudaStreamCreate(&blocking));
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t e1, e2;
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventCreate(&e2));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;

  // implicit: the query fails, the capture goes on and its graph runs
  CHECK(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal));
  add<<<1, 1, 0, blocking>>>(x, 1);
  printf("legacy_query=%d\n", capturing(0));
  CHECK(cudaStreamEndCapture(blocking, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, blocking));
  CHECK(cudaStreamSynchronize(blocking));
  printf("legacy_after=%d\n", capturing(0));
  // work on the legacy stream during the capture fails and spoils it
  CHECK(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal));
  add<<<1, 1, 0, blocking>>>(x, 100);
  add<<<1, 1>>>(x, 1000);
  printf("legacy_launch=%d\n", static_cast<int>(cudaGetLastError()));
  printf("implicit_end=%d\n", static_cast<int>(cudaStreamEndCapture(blocking, &graph)));
  printf("implicit_left=%d\n", capturing(blocking));

  // unmatched
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  printf("not_capturing_end=%d\n", static_cast<int>(cudaStreamEndCapture(s2, &graph)));
  CHECK(cudaEventRecord(e1, s1));
  CHECK(cudaStreamWaitEvent(s2, e1, 0));
  add<<<1, 1, 0, s2>>>(x, 10000);
  printf("unmatched=%d\n", static_cast<int>(cudaStreamEndCapture(s2, &graph)));
  printf("after_unmatched=%d\n", static_cast<int>(cudaStreamEndCapture(s1, &graph)));
  printf("unmatched_left=%d,%d\n", capturing(s1), capturing(s2));

  // unjoined
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  add<<<1, 1, 0, s1>>>(x, 10000);
  CHECK(cudaEventRecord(e1, s1));
  CHECK(cudaStreamWaitEvent(s2, e1, 0));
  add<<<1, 1, 0, s2>>>(x, 10000);
  printf("unjoined=%d\n", static_cast<int>(cudaStreamEndCapture(s1, &graph)));
  printf("unjoined_left=%d,%d\n", capturing(s1), capturing(s2));

  // joined back: the graph adds 2 + 3
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  add<<<1, 1, 0, s1>>>(x, 2);
  CHECK(cudaEventRecord(e1, s1));
  CHECK(cudaStreamWaitEvent(s2, e1, 0));
  add<<<1, 1, 0, s2>>>(x, 3);
  CHECK(cudaEventRecord(e2, s2));
  CHECK(cudaStreamWaitEvent(s1, e2, 0));
  CHECK(cudaStreamEndCapture(s1, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, s1));
  CHECK(cudaStreamSynchronize(s1));

  // nothing captured by a failed capture ran: 1 (first graph) + 5 (the joined one)
  add<<<1, 1, 0, s2>>>(x, 0);
  CHECK(cudaStreamSynchronize(s2));
  int host = 0;
  CHECK(cudaMemcpy(&host, x, sizeof(host), cudaMemcpyDeviceToHost));
  printf("sum=%d\n", host);
  printf("done\n");
  return 0;
}
