// What the driver-API test programs share: CHECK (a failing call prints where and
// the error code, then exits 1), setup (the primary context of device 0, current)
// and read_file (a whole file, NUL-terminated, for cuModuleLoadData).
#ifndef TALLY_TEST_DRIVER_CHECK_H
#define TALLY_TEST_DRIVER_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "driver_call.h"

#define CHECK(call) DRIVER(call)

static inline void setup(void) {
  CUdevice dev;
  CUcontext ctx;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
}

// `size` may be NULL.
static inline char* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    printf("error cannot open %s\n", path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = (char*)malloc(n + 1);
  if (fread(buf, 1, n, f) != (size_t)n) exit(1);
  buf[n] = 0;
  fclose(f);
  if (size) *size = n;
  return buf;
}

#endif
