// Many short kernels in a row, each depending on the one before: what a
// best-effort batch (several of a job's whole kernels on the device at once)
// must keep in order. Two streams, the second waiting on the first through an
// event halfway for a snapshot of the first one's value, so order across streams
// is checked too.
// Usage: short_kernel_chain [KERNELS]; prints "results correct" and the count.
#include <cstdio>
#include <cstdlib>
#include "runtime_check.h"

constexpr int kThreads = 32;

// x <- 3x + step: applying the steps in another order gives another result
__global__ void step(unsigned* x, unsigned k) { x[threadIdx.x] = x[threadIdx.x] * 3u + k + threadIdx.x; }

int main(int argc, char** argv) {
  int kernels = argc > 1 ? atoi(argv[1]) : 600;
  unsigned *a, *b, *snapshot, host_a[kThreads], host_b[kThreads];
  cudaStream_t first, second;
  cudaEvent_t half;
  CHECK(cudaMalloc(&a, sizeof host_a));
  CHECK(cudaMalloc(&b, sizeof host_b));
  CHECK(cudaMalloc(&snapshot, sizeof host_b));
  CHECK(cudaMemset(a, 0, sizeof host_a));
  CHECK(cudaStreamCreate(&first));
  CHECK(cudaStreamCreate(&second));
  CHECK(cudaEventCreateWithFlags(&half, cudaEventDisableTiming));
  for (int k = 0; k < kernels; ++k) {
    step<<<1, kThreads, 0, first>>>(a, k);
    if (k == kernels / 2) {   // b starts from a's value here (a copy: `first` goes on changing a)
      CHECK(cudaMemcpyAsync(snapshot, a, sizeof host_b, cudaMemcpyDeviceToDevice, first));
      CHECK(cudaEventRecord(half, first));
      CHECK(cudaStreamWaitEvent(second, half, 0));
      CHECK(cudaMemcpyAsync(b, snapshot, sizeof host_b, cudaMemcpyDeviceToDevice, second));
    }
  }
  for (int k = 0; k < kernels; ++k) step<<<1, kThreads, 0, second>>>(b, k);
  CHECK(cudaMemcpyAsync(host_a, a, sizeof host_a, cudaMemcpyDeviceToHost, first));
  CHECK(cudaMemcpyAsync(host_b, b, sizeof host_b, cudaMemcpyDeviceToHost, second));
  CHECK(cudaDeviceSynchronize());
  int wrong_a = 0, wrong_b = 0;
  for (unsigned t = 0; t < kThreads; ++t) {
    unsigned want_a = 0, want_b = 0;
    for (int k = 0; k < kernels; ++k) {
      want_a = want_a * 3u + k + t;
      if (k == kernels / 2) want_b = want_a;
    }
    for (int k = 0; k < kernels; ++k) want_b = want_b * 3u + k + t;
    wrong_a += host_a[t] != want_a;
    wrong_b += host_b[t] != want_b;
  }
  if (wrong_b) {   // which of a's values b started from (-1: before any kernel; -2: none)
    int from = -2;
    for (int c = -1; c < kernels && from == -2; ++c) {
      unsigned start = 0, v;
      for (int k = 0; k <= c; ++k) start = start * 3u + k;
      v = start;
      for (int k = 0; k < kernels; ++k) v = v * 3u + k;
      if (v == host_b[0]) from = c;
    }
    printf("b_started_from_a_after_kernel=%d (want %d)\n", from, kernels / 2);
  }
  int wrong = wrong_a + wrong_b;
  printf("kernels=%d wrong_a=%d wrong_b=%d\n", 2 * kernels, wrong_a, wrong_b);
  if (wrong == 0) printf("results correct\n");
  return wrong != 0;
}
