// The JIT linker through the driver API (cuLink*): two relocatable PTX inputs
// linked into one image that cuModuleLoadData loads, with info and error logs.
//   linker KERNELS_PTX FUNCTIONS_PTX
// Prints key=value lines (CUresults as numbers, log sizes) and the logs on lines
// starting "info: " and "error: "; exits 0 unless the setup itself fails.
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "driver_check.h"

enum { N = 100, LOG = 4096 };

static char info_log[LOG], error_log[LOG];

// Options with log buffers; *values must outlive the link state (CUDA's rule for output options).
static void create(CUlinkState* link, void** values, int verbose) {
  CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE, CU_JIT_WALL_TIME,
                            CU_JIT_OPTIMIZATION_LEVEL, CU_JIT_TARGET_FROM_CUCONTEXT};
  memset(info_log, 'x', sizeof info_log);
  memset(error_log, 'x', sizeof error_log);
  values[0] = info_log;
  values[1] = (void*)(size_t)LOG;
  values[2] = error_log;
  values[3] = (void*)(size_t)LOG;
  values[4] = (void*)(size_t)verbose;
  values[5] = 0;
  values[6] = (void*)(size_t)4;
  values[7] = 0;
  CHECK(cuLinkCreate(8, options, values, link));
}

static void print_log(const char* what, const char* log) {
  char copy[LOG];
  strcpy(copy, log);
  for (char* line = strtok(copy, "\n"); line != NULL; line = strtok(NULL, "\n")) printf("%s: %s\n", what, line);
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  size_t kernels_size = 0;
  char* kernels = read_file(argv[1], &kernels_size);
  setup();

  // Both inputs, one as data and one as a file: the kernel runs with the other's code.
  CUlinkState link;
  void* values[8];
  create(&link, values, 1);
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, kernels, kernels_size + 1, "kernels.ptx", 0, NULL, NULL));
  CHECK(cuLinkAddFile(link, CU_JIT_INPUT_PTX, argv[2], 0, NULL, NULL));
  void* image = NULL;
  size_t image_size = 0;
  CHECK(cuLinkComplete(link, &image, &image_size));
  float wall_ms = 0;
  memcpy(&wall_ms, &values[5], sizeof wall_ms);
  printf("image_is_ptx=%d image_terminated=%d info_size=%zu clean_error_size=%zu wall_time_set=%d\n",
         strncmp((const char*)image, "//", 2) == 0 || strstr((const char*)image, ".version") != NULL,
         ((const char*)image)[image_size - 1] == '\0', (size_t)values[1], (size_t)values[3], wall_ms > 0);
  print_log("info", info_log);
  CUmodule mod;
  CUfunction evaluate;
  CHECK(cuModuleLoadData(&mod, image));
  CHECK(cuLinkDestroy(link));  // the module keeps what it loaded
  CHECK(cuModuleGetFunction(&evaluate, mod, "evaluate"));
  CUdeviceptr out;
  CHECK(cuMemAlloc(&out, N * sizeof(int)));
  int n = N;
  void* params[] = {&out, &n};
  CHECK(cuLaunchKernel(evaluate, 1, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
  int host[N];
  CHECK(cuMemcpyDtoH(host, out, sizeof host));
  int wrong = 0;
  for (int i = 0; i < N; ++i) wrong += host[i] != 3 * i * i + 2 * i + 1 + 7;
  printf("out5=%d wrong=%d\n", host[5], wrong);
  CUdeviceptr offset;
  size_t offset_size = 0;
  CHECK(cuModuleGetGlobal(&offset, &offset_size, mod, "offset"));
  printf("offset_size=%zu\n", offset_size);
  CUresult destroyed_again = cuLinkDestroy(link);
  CUresult complete_destroyed = cuLinkComplete(link, &image, &image_size);
  printf("destroyed_again=%d complete_destroyed=%d\n", (int)destroyed_again, (int)complete_destroyed);

  // The kernels alone: the functions they call are missing.
  create(&link, values, 0);
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, kernels, kernels_size + 1, "kernels.ptx", 0, NULL, NULL));
  CUresult rc = cuLinkComplete(link, &image, &image_size);
  printf("unresolved=%d error_size=%zu error_len=%zu\n", (int)rc, (size_t)values[3], strlen(error_log));
  print_log("error", error_log);
  CHECK(cuLinkDestroy(link));

  // Input errors surface at cuLinkAddData, and accumulate in the error log.
  create(&link, values, 0);
  const char bad[] = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry broken( {\n";
  CUjit_option refused = CU_JIT_TARGET;
  void* refused_value = (void*)(size_t)CU_TARGET_COMPUTE_80;
  CUresult bad_ptx = cuLinkAddData(link, CU_JIT_INPUT_PTX, (void*)bad, sizeof bad, "bad.ptx", 0, NULL, NULL);
  CUresult no_file = cuLinkAddFile(link, CU_JIT_INPUT_PTX, "/nonexistent/x.ptx", 0, NULL, NULL);
  CUresult refused_rc =
      cuLinkAddData(link, CU_JIT_INPUT_PTX, kernels, kernels_size + 1, "k", 1, &refused, &refused_value);
  CUresult bad_type = cuLinkAddData(link, (CUjitInputType)99, kernels, kernels_size + 1, "k", 0, NULL, NULL);
  CUresult library = cuLinkAddData(link, CU_JIT_INPUT_LIBRARY, kernels, kernels_size + 1, "lib.a", 0, NULL, NULL);
  printf("bad_ptx=%d no_file=%d refused_option=%d bad_type=%d library=%d\n", (int)bad_ptx, (int)no_file,
         (int)refused_rc, (int)bad_type, (int)library);
  print_log("error", error_log);
  CHECK(cuLinkDestroy(link));

  // A small log buffer gets what fits, NUL-terminated.
  CUjit_option small_options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  char small[16];
  void* small_values[] = {small, (void*)(size_t)sizeof small};
  CHECK(cuLinkCreate(2, small_options, small_values, &link));
  rc = cuLinkAddData(link, CU_JIT_INPUT_PTX, kernels, kernels_size + 1, "kernels.ptx", 0, NULL, NULL);
  rc = cuLinkComplete(link, &image, &image_size);
  printf("small_rc=%d small_len=%zu small_filled=%zu\n", (int)rc, strlen(small), (size_t)small_values[1]);
  CHECK(cuLinkDestroy(link));
  printf("bad_option=%d\n", (int)cuLinkCreate(1, (CUjit_option[]){(CUjit_option)15}, small_values, &link));
  printf("done=1\n");
  return 0;
}
