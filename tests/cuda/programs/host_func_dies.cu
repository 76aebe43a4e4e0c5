// A job that dies inside its own host function, while the server holds the
// stream for it (and more work waits behind it). The server must not wait for
// the answer forever: it releases the stream and frees the job's memory.
#include <csignal>
#include <cstdio>
#include <cuda_runtime.h>

__global__ void touch(int* p) { p[threadIdx.x] += 1; }

void CUDART_CB die(void*) {
  printf("in_callback\n");
  fflush(stdout);
  raise(SIGKILL);
}

int main() {
  int* p;
  if (cudaMalloc(&p, 1 << 20) != cudaSuccess) return 1;
  cudaStream_t s;
  cudaStreamCreate(&s);
  touch<<<1, 32, 0, s>>>(p);
  cudaLaunchHostFunc(s, die, nullptr);
  touch<<<1, 32, 0, s>>>(p);
  cudaStreamSynchronize(s);
  printf("unreachable\n");
  return 0;
}
