// Two translation units compiled separately (-dc / -rdc) and linked: kCaller's kernel
// shift_all calls shifted(), which only kCallee defines. check_shift_all runs the linked
// kernel over 1000 floats and prints checked=<n> bad=<n> against the host's result.
// Shared by the JIT-linker test programs (nvrtc_cubin.cu, nvjitlink_cubin.cu).
#ifndef TALLY_TEST_RELOCATABLE_PAIR_H
#define TALLY_TEST_RELOCATABLE_PAIR_H

#include <stdio.h>

#include <vector>

#include "driver_check.h"

static const char kCaller[] = R"(
extern __device__ float shifted(float x);
extern "C" __global__ void shift_all(float* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = shifted(v[i]);
}
)";
static const char kCallee[] = R"(
__device__ float shifted(float x) { return 2.0f * x + 3.0f; }
)";

static inline void check_shift_all(CUmodule mod) {
  CUfunction f;
  CHECK(cuModuleGetFunction(&f, mod, "shift_all"));
  int n = 1000;
  std::vector<float> v(n), out(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(i % 50);
  CUdeviceptr dv;
  CHECK(cuMemAlloc(&dv, n * sizeof(float)));
  CHECK(cuMemcpyHtoD(dv, v.data(), n * sizeof(float)));
  void* params[] = {&dv, &n};
  CHECK(cuLaunchKernel(f, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
  CHECK(cuMemcpyDtoH(out.data(), dv, n * sizeof(float)));
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += out[i] != 2.0f * v[i] + 3.0f;
  printf("checked=%d bad=%d\n", n, bad);
}

#endif  // TALLY_TEST_RELOCATABLE_PAIR_H
