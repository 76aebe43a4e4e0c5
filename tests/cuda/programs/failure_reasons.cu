// Calls that fail on the server, each kind more than once: a synchronous copy from
// memory the job does not own (three times), an asynchronous memset of such memory
// whose error surfaces at the next stream synchronization (twice), and a kernel that
// writes through a wild pointer, found at the device synchronization. Prints what
// each call returned; the test reads tally's explanations on stderr.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void write_wild(int* p) { p[threadIdx.x] = 42; }

int main() {
  int host[64];
  int* not_mine = reinterpret_cast<int*>(0x7f0000000000ull);
  cudaStream_t stream;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 1;
  for (int i = 0; i < 3; ++i) {
    cudaError_t e = cudaMemcpy(host, not_mine, sizeof host, cudaMemcpyDeviceToHost);
    printf("memcpy_%d=%d\n", i, (int)e);
    cudaGetLastError();
  }
  for (int i = 0; i < 2; ++i) {
    cudaError_t queued = cudaMemsetAsync(not_mine, 0, sizeof host, stream);
    cudaError_t synced = cudaStreamSynchronize(stream);
    printf("memset_async_%d=%d sync_%d=%d\n", i, (int)queued, i, (int)synced);
    cudaGetLastError();
  }
  write_wild<<<1, 32>>>(reinterpret_cast<int*>(0x10));
  cudaError_t fault = cudaDeviceSynchronize();
  printf("kernel_fault=%d\n", (int)fault);
  fflush(stdout);
  return 0;
}
