// Device printf under tally: the text must reach the job's own stdout, at the
// job's synchronizing call, in order with what the host printed around it.
#include <cstdio>

__global__ void greet(int tag) {
  if (threadIdx.x < 2) printf("kernel %d: block %d thread %d\n", tag, blockIdx.x, threadIdx.x);
}

int main() {
  std::printf("host: before\n");
  greet<<<2, 32>>>(7);
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("host: after sync=%d\n", int(e));
  greet<<<1, 32>>>(8);
  e = cudaDeviceSynchronize();
  std::printf("host: done sync=%d\n", int(e));
  return e == cudaSuccess ? 0 : 1;
}
