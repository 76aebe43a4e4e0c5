// A kernel that writes through a wild pointer. The launch itself succeeds; the job
// sees CUDA_ERROR_ILLEGAL_ADDRESS (cudaErrorIllegalAddress, 700) at its next
// synchronizing call. Prints what each call returned.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void write_wild(int* p) { p[threadIdx.x] = 42; }

int main() {
  int* ok;
  cudaError_t e = cudaMalloc(&ok, 64);
  printf("malloc=%d\n", (int)e);
  write_wild<<<1, 32>>>(reinterpret_cast<int*>(0x10));
  printf("launch=%d\n", (int)cudaGetLastError());
  e = cudaDeviceSynchronize();
  printf("sync=%d name=%s\n", (int)e, cudaGetErrorName(e));
  fflush(stdout);
  return 0;
}
