// The driver version a job sees: cuDriverGetVersion before anything else (cudart
// has not started, nothing is connected yet), cudaDriverGetVersion, then again
// once the runtime is up; with "all" a kernel also runs (cudart hashed the version
// into its integrity check, so a version that changed would fail it).
// Prints key=value lines the test checks.
#include <cuda.h>
#include <cstdio>
#include <cstring>

#include "runtime_check.h"

__global__ void store_seven(int* out) { *out = 7; }

int main(int argc, char** argv) {
  int before_init = 0;
  CUresult rc = cuDriverGetVersion(&before_init);
  printf("driver_before_init=%d rc=%d\n", before_init, (int)rc);
  printf("null_pointer_rc=%d\n", (int)cuDriverGetVersion(nullptr));
  if (argc > 1 && std::strcmp(argv[1], "before-init-only") == 0) return 0;

  int runtime_driver = 0;
  CHECK(cudaDriverGetVersion(&runtime_driver));
  printf("runtime_driver=%d\n", runtime_driver);
  int* out = nullptr;
  CHECK(cudaMalloc(&out, sizeof(int)));
  store_seven<<<1, 1>>>(out);
  int seven = 0;
  CHECK(cudaMemcpy(&seven, out, sizeof seven, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(out));
  int after_init = 0;
  cuDriverGetVersion(&after_init);
  printf("driver_after_init=%d kernel_result=%d\n", after_init, seven);
  return 0;
}
