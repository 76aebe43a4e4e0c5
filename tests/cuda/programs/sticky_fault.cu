// A kernel fault is sticky for the job that caused it, as on a GPU: after its
// kernel writes through a wild pointer, every call that reaches the device returns
// the fault, until cudaDeviceReset; then the job runs kernels again. Prints
// before_good=<elements right> fault=<the synchronization after the bad kernel>
// copy=<a copy after it> malloc=<an allocation after it> launch=<a launch after it>
// reset=<cudaDeviceReset> after_good=<elements right after the reset, -1 if a call failed>.
#include <cstdio>
#include <cuda_runtime.h>

constexpr int N = 2048;

__global__ void write_wild(int* p) { p[threadIdx.x] = 42; }

__global__ void square(const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * in[i];
}

static int squares_good() {
  static int host_in[N], host_out[N];
  for (int i = 0; i < N; ++i) host_in[i] = i % 1000 - 500;
  int *in = nullptr, *out = nullptr;
  if (cudaMalloc(&in, sizeof host_in) != cudaSuccess || cudaMalloc(&out, sizeof host_out) != cudaSuccess) return -1;
  if (cudaMemcpy(in, host_in, sizeof host_in, cudaMemcpyHostToDevice) != cudaSuccess) return -1;
  square<<<N / 128, 128>>>(in, out, N);
  if (cudaDeviceSynchronize() != cudaSuccess) return -1;
  if (cudaMemcpy(host_out, out, sizeof host_out, cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
  cudaFree(in);
  cudaFree(out);
  int good = 0;
  for (int i = 0; i < N; ++i) good += host_out[i] == host_in[i] * host_in[i];
  return good;
}

int main() {
  printf("before_good=%d\n", squares_good());
  write_wild<<<1, 32>>>(reinterpret_cast<int*>(0x10));
  cudaError_t fault = cudaDeviceSynchronize();
  int host = 0;
  int* ptr = nullptr;
  cudaError_t copy = cudaMemcpy(&host, reinterpret_cast<void*>(0x1000), sizeof host, cudaMemcpyDeviceToHost);
  cudaError_t malloc_status = cudaMalloc(&ptr, 256);
  square<<<1, 32>>>(ptr, ptr, 32);
  cudaError_t launch = cudaGetLastError();
  printf("fault=%d copy=%d malloc=%d launch=%d\n", (int)fault, (int)copy, (int)malloc_status, (int)launch);
  cudaError_t reset = cudaDeviceReset();
  printf("reset=%d after_good=%d\n", (int)reset, squares_good());
  fflush(stdout);
  return 0;
}
