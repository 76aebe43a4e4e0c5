// Looks entry points up through our cuGetProcAddress, both forms.
// Usage: proc_address (v2|v1) NAME VERSION FLAGS [NAME VERSION FLAGS ...]
// Prints per lookup: "lookup NAME VERSION FLAGS rc=R status=S fn=null|set".
// Then "driver_version=N" from the cuDriverGetVersion pointer it looked up.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  int v1 = strcmp(argv[1], "v1") == 0;
  PFN_cuGetProcAddress_v11030 get_v1 = (PFN_cuGetProcAddress_v11030)dlsym(RTLD_DEFAULT, "cuGetProcAddress");
  if (get_v1 == NULL) {
    printf("no cuGetProcAddress symbol\n");
    return 1;
  }
  for (int i = 2; i + 2 < argc; i += 3) {
    const char* name = strcmp(argv[i], "NULL") == 0 ? NULL : argv[i];
    int version = atoi(argv[i + 1]);
    unsigned long long flags = strtoull(argv[i + 2], NULL, 0);
    void* fn = (void*)0x1;
    CUdriverProcAddressQueryResult status = (CUdriverProcAddressQueryResult)99;
    CUresult rc = v1 ? get_v1(name, &fn, version, flags) : cuGetProcAddress(name, &fn, version, flags, &status);
    printf("lookup %s %d %llu rc=%d status=%d fn=%s\n", argv[i], version, flags, (int)rc, v1 ? -1 : (int)status,
           fn == NULL ? "null" : "set");
  }
  void* fn = NULL;
  CUdriverProcAddressQueryResult status;
  if (cuGetProcAddress("cuDriverGetVersion", &fn, 2020, 0, &status) == CUDA_SUCCESS && fn != NULL) {
    int version = 0;
    CUresult rc = ((PFN_cuDriverGetVersion_v2020)fn)(&version);
    printf("driver_version=%d rc=%d\n", version, (int)rc);
  }
  // NULL out-pointers are an error, not a crash.
  printf("null_pfn=%d\n", (int)cuGetProcAddress("cuInit", NULL, 2000, 0, NULL));
  return 0;
}
