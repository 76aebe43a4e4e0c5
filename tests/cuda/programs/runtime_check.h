// What the CUDA runtime test programs share: CHECK (a failing call prints where,
// the error code and its name, then exits 1).
#ifndef TALLY_TEST_RUNTIME_CHECK_H
#define TALLY_TEST_RUNTIME_CHECK_H

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    cudaError_t e = (call);                                                                  \
    if (e != cudaSuccess) {                                                                  \
      printf("error %s at line %d: %d %s\n", #call, __LINE__, (int)e, cudaGetErrorName(e)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

#endif
