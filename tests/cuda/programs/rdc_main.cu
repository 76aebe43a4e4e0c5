// An -rdc=true program with its device code in two files (rdc_device.cu defines
// the device function and the counter this kernel uses): cudart registers it
// through __cudaRegisterLinkedBinary_*, and the driver links it when it loads.
// Prints key=value lines; exits 1 if a CUDA call fails.
#include <cstdio>

#include "runtime_check.h"

extern __device__ float twice_plus(float x, float y);
extern __device__ unsigned calls;

__global__ void apply(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = twice_plus(in[i], 1.0f);
    atomicAdd(&calls, 1u);
  }
}

int main() {
  const int n = 300;
  float host[n];
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  float *in, *out;
  CHECK(cudaMalloc(&in, sizeof host));
  CHECK(cudaMalloc(&out, sizeof host));
  CHECK(cudaMemcpy(in, host, sizeof host, cudaMemcpyHostToDevice));
  apply<<<(n + 127) / 128, 128>>>(out, in, n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost));
  unsigned counted = 0;
  CHECK(cudaMemcpyFromSymbol(&counted, calls, sizeof counted));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += host[i] != 2.0f * i + 1.0f;
  printf("out7=%g wrong=%d calls=%u\n", host[7], wrong, counted);
  return 0;
}
