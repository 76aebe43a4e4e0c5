// DRIVER: a failing driver call prints where and its error code, then exits 1.
// Programs that also make runtime calls (runtime_check.h's CHECK) use it by this
// name; driver_check.h gives it to driver-API-only programs (C too) as CHECK.
#ifndef TALLY_TEST_DRIVER_CALL_H
#define TALLY_TEST_DRIVER_CALL_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define DRIVER(call)                                                   \
  do {                                                                 \
    CUresult rc_ = (call);                                             \
    if (rc_ != CUDA_SUCCESS) {                                         \
      printf("error %s at line %d: %d\n", #call, __LINE__, (int)rc_); \
      exit(1);                                                         \
    }                                                                  \
  } while (0)

#endif
