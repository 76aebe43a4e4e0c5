// Prints cuGetErrorName/cuGetErrorString for the codes given, and how many of
// 0..1000 have a name. Usage: error_strings CODE [CODE ...]
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    CUresult code = (CUresult)atoi(argv[i]);
    const char* name = "unset";
    const char* text = "unset";
    int name_rc = (int)cuGetErrorName(code, &name);
    int text_rc = (int)cuGetErrorString(code, &text);
    printf("code=%d %d %s\n", (int)code, name_rc, name ? name : "NULL");
    printf("text=%d %d %s\n", (int)code, text_rc, text ? text : "NULL");
  }
  int named = 0;
  for (int code = 0; code <= 1000; ++code) {
    const char* name = NULL;
    named += cuGetErrorName((CUresult)code, &name) == CUDA_SUCCESS && name != NULL;
  }
  printf("named=%d\n", named);
  printf("null_out=%d\n", (int)cuGetErrorName(CUDA_SUCCESS, NULL));
  // A null function or kernel is an invalid value to the driver, not an invalid handle.
  const char* fname = NULL;
  printf("func_name_null=%d\n", (int)cuFuncGetName(&fname, NULL));
  printf("kernel_name_null=%d\n", (int)cuKernelGetName(&fname, NULL));
  return 0;
}
