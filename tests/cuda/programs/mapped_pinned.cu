// Kernels reading and writing pinned host memory directly, at its host address
// (unified addressing): cudaHostAlloc(Mapped) with cudaHostGetDevicePointer,
// cudaMallocHost used as is, and a malloc'ed buffer after cudaHostRegister(Mapped).
// Prints key=value lines the test checks.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void write_iota(int* out, int factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * factor;
}

__global__ void sum_from_host(const int* in, int n, int* total) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(total, in[i]);
}

static int check_iota(const int* h, int factor, int n) {
  int good = 0;
  for (int i = 0; i < n; ++i) good += h[i] == i * factor;
  return good;
}

int main() {
  const int n = 4096;
  int attr = -1;
  CHECK(cudaDeviceGetAttribute(&attr, cudaDevAttrCanUseHostPointerForRegisteredMem, 0));
  printf("attr_host_pointer=%d\n", attr);

  int* mapped = nullptr;
  int* mapped_dev = nullptr;
  CHECK(cudaHostAlloc(&mapped, n * sizeof(int), cudaHostAllocMapped));
  CHECK(cudaHostGetDevicePointer(&mapped_dev, mapped, 0));
  write_iota<<<n / 256, 256>>>(mapped_dev, 3, n);
  CHECK(cudaDeviceSynchronize());
  printf("mapped_same_pointer=%d mapped_good=%d\n", mapped_dev == mapped, check_iota(mapped, 3, n));

  int* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, n * sizeof(int)));
  write_iota<<<n / 256, 256>>>(pinned, 5, n);  // the host pointer itself
  CHECK(cudaDeviceSynchronize());
  printf("pinned_good=%d\n", check_iota(pinned, 5, n));

  int* plain = static_cast<int*>(aligned_alloc(4096, n * sizeof(int)));
  for (int i = 0; i < n; ++i) plain[i] = 2;
  CHECK(cudaHostRegister(plain, n * sizeof(int), cudaHostRegisterMapped));
  int* total = nullptr;
  CHECK(cudaMalloc(&total, sizeof(int)));
  CHECK(cudaMemset(total, 0, sizeof(int)));
  sum_from_host<<<n / 256, 256>>>(plain, n, total);
  int sum = 0;
  CHECK(cudaMemcpy(&sum, total, sizeof sum, cudaMemcpyDeviceToHost));
  printf("registered_sum=%d\n", sum);
  CHECK(cudaHostUnregister(plain));
  printf("plain_intact=%d\n", plain[0] == 2 && plain[n - 1] == 2);

  CHECK(cudaFreeHost(mapped));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(total));
  free(plain);
  printf("done=1\n");
  return 0;
}
