// A long-running kernel (spins for argv[1] iterations per thread) after a
// device allocation, for killing a job mid-kernel. Prints "launched" once the
// kernel is queued and "finished" if it ever completes.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void spin(unsigned* out, unsigned iterations) {
  unsigned v = threadIdx.x;
  for (unsigned i = 0; i < iterations; ++i) v = v * 1664525u + 1013904223u;
  out[threadIdx.x] = v;
}

int main(int argc, char** argv) {
  unsigned iterations = argc > 1 ? (unsigned)strtoul(argv[1], nullptr, 0) : 100000000u;
  unsigned* out;
  if (cudaMalloc(&out, 1 << 20) != cudaSuccess) return 1;  // memory the server must free when we die
  spin<<<1, 32>>>(out, iterations);
  printf("launched\n");
  fflush(stdout);
  cudaError_t e = cudaDeviceSynchronize();
  printf("finished=%d\n", (int)e);
  return 0;
}
