// A cubin made at run time, as a JIT compiler's job loads it:
//   jit_cubin CUBIN [wait]  cuModuleLoadData(the file's bytes), then `vadd` (c = a + b)
//                           over 1000 floats, results read back and checked on the host;
//                           with `wait`, it then waits for a line on stdin with the
//                           module still loaded (a test reads the server's status).
// Prints load=<CUresult of the load>; with a module, checked=<n> bad=<n>. Exits 0
// unless a call after the load fails.
#include <cuda.h>
#include <stdio.h>

#include "driver_check.h"

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    printf("usage: jit_cubin CUBIN [wait]\n");
    return 2;
  }
  setup();
  char* image = read_file(argv[1], NULL);
  CUmodule mod;
  CUresult rc = cuModuleLoadData(&mod, image);
  printf("load=%d\n", (int)rc);
  fflush(stdout);
  if (rc != CUDA_SUCCESS) return 0;
  CUfunction vadd;
  CHECK(cuModuleGetFunction(&vadd, mod, "vadd"));
  enum { N = 1000 };
  static float a[N], b[N], c[N];
  for (int i = 0; i < N; ++i) {
    a[i] = (float)i;
    b[i] = 0.5f * (float)i + 1.0f;
  }
  CUdeviceptr da, db, dc;
  CHECK(cuMemAlloc(&da, sizeof a));
  CHECK(cuMemAlloc(&db, sizeof b));
  CHECK(cuMemAlloc(&dc, sizeof c));
  CHECK(cuMemcpyHtoD(da, a, sizeof a));
  CHECK(cuMemcpyHtoD(db, b, sizeof b));
  int n = N;
  void* params[] = {&da, &db, &dc, &n};
  CHECK(cuLaunchKernel(vadd, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
  CHECK(cuMemcpyDtoH(c, dc, sizeof c));
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += c[i] != a[i] + b[i];
  printf("checked=%d bad=%d\n", N, bad);
  if (argc == 3) {
    char line[16];
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 1;
  }
  CHECK(cuModuleUnload(mod));
  return 0;
}
