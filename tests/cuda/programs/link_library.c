// The JIT linker with a static library: kernels PTX plus an ar archive of host
// objects carrying PTX (cuLinkAddFile with CU_JIT_INPUT_LIBRARY), then the kernel
// runs with the library's code. A `.a` that is not an archive fails to add.
//   link_library KERNELS_PTX LIBRARY
// Prints key=value lines and the info log on lines starting "info: ".
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "driver_check.h"

enum { N = 64, LOG = 8192 };

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  setup();
  static char info[LOG], error[LOG];
  CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE};
  void* values[] = {info, (void*)(size_t)LOG, error, (void*)(size_t)LOG, (void*)(size_t)1};
  CUlinkState link;
  CHECK(cuLinkCreate(5, options, values, &link));
  CHECK(cuLinkAddFile(link, CU_JIT_INPUT_PTX, argv[1], 0, NULL, NULL));
  CHECK(cuLinkAddFile(link, CU_JIT_INPUT_LIBRARY, argv[2], 0, NULL, NULL));
  CUresult not_archive = cuLinkAddFile(link, CU_JIT_INPUT_LIBRARY, argv[1], 0, NULL, NULL);
  void* image = NULL;
  size_t image_size = 0;
  CUresult complete = cuLinkComplete(link, &image, &image_size);
  printf("not_archive=%d complete=%d\n", (int)not_archive, (int)complete);
  for (char* line = strtok(info, "\n"); line != NULL; line = strtok(NULL, "\n")) printf("info: %s\n", line);
  if (complete != CUDA_SUCCESS) {
    printf("error: %s\n", error);
    return 1;
  }
  CUmodule module;
  CHECK(cuModuleLoadData(&module, image));
  CHECK(cuLinkDestroy(link));
  CUfunction apply;
  CHECK(cuModuleGetFunction(&apply, module, "apply"));
  CUdeviceptr out;
  CHECK(cuMemAlloc(&out, N * sizeof(int)));
  int n = N;
  void* params[] = {&out, &n};
  CHECK(cuLaunchKernel(apply, 1, 1, 1, N, 1, 1, 0, NULL, params, NULL));
  int host[N];
  CHECK(cuMemcpyDtoH(host, out, sizeof host));
  int wrong = 0;
  for (int i = 0; i < N; ++i) wrong += host[i] != 3 * i + 1;
  printf("wrong=%d out10=%d\n", wrong, host[10]);
  return 0;
}
