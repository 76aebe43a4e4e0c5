// A CUDA runtime program's start: device queries answered from the server's
// snapshot, then a cudaMalloc that reaches the server.
#include <cstdio>
#include <cuda_runtime.h>

int main() {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  printf("driver=%d runtime=%d\n", driver, runtime);
  int count = -1;
  cudaError_t e = cudaGetDeviceCount(&count);
  printf("count_rc=%d count=%d\n", (int)e, count);
  if (e != cudaSuccess) return 0;
  cudaDeviceProp prop;
  e = cudaGetDeviceProperties(&prop, 0);
  printf("props_rc=%d name=%s cc=%d.%d sms=%d\n", (int)e, prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  void* p = nullptr;
  e = cudaMalloc(&p, 1 << 20);
  printf("malloc_rc=%d name=%s\n", (int)e, cudaGetErrorName(e));
  return 0;
}
