// A job that blocks in one kind of wait behind a long-running kernel, for killing
// it there: argv[1] names the wait, argv[2] the kernel's iterations per thread.
// Prints "waiting" once the kernel is queued and the wait is about to begin, and
// "returned=<error>" if the wait ever returns.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <unistd.h>

__global__ void spin(unsigned* out, unsigned iterations) {
  unsigned v = threadIdx.x;
  for (unsigned i = 0; i < iterations; ++i) v = v * 1664525u + 1013904223u;
  out[threadIdx.x] = v;
}

// A host function that never returns: its stream, and whoever waits for it, stay blocked.
static void CUDART_CB never_returns(void*) {
  for (;;) pause();
}

int main(int argc, char** argv) {
  if (argc < 3) {
    printf("usage: %s ctx|stream|event|memcpy_pageable|memcpy_pinned|free|free_host|host_func ITERATIONS\n",
           argv[0]);
    return 2;
  }
  const char* wait = argv[1];
  unsigned iterations = (unsigned)strtoul(argv[2], nullptr, 0);
  unsigned *out, *pinned;
  static unsigned pageable[32];
  cudaStream_t stream;
  cudaEvent_t done;
  if (cudaMalloc(&out, 1 << 20) != cudaSuccess || cudaMallocHost(&pinned, 4096) != cudaSuccess ||
      cudaStreamCreate(&stream) != cudaSuccess || cudaEventCreate(&done) != cudaSuccess)
    return 1;
  spin<<<1, 32, 0, stream>>>(out, iterations);
  if (strcmp(wait, "host_func") == 0) cudaLaunchHostFunc(stream, never_returns, nullptr);
  cudaEventRecord(done, stream);
  printf("waiting\n");
  fflush(stdout);
  cudaError_t e = cudaErrorInvalidValue;
  if (strcmp(wait, "ctx") == 0) e = cudaDeviceSynchronize();
  if (strcmp(wait, "stream") == 0 || strcmp(wait, "host_func") == 0) e = cudaStreamSynchronize(stream);
  if (strcmp(wait, "event") == 0) e = cudaEventSynchronize(done);
  if (strcmp(wait, "memcpy_pageable") == 0) e = cudaMemcpy(pageable, out, sizeof pageable, cudaMemcpyDeviceToHost);
  if (strcmp(wait, "memcpy_pinned") == 0) e = cudaMemcpy(pinned, out, 4096, cudaMemcpyDeviceToHost);
  if (strcmp(wait, "free") == 0) e = cudaFree(out);           // waits for the kernel that uses it
  if (strcmp(wait, "free_host") == 0) e = cudaFreeHost(pinned);  // likewise for pinned memory
  printf("returned=%d\n", (int)e);
  return 0;
}
