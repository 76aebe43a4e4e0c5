// Calls an entry point tally does not implement from several threads, through the
// exported symbol and through a cuGetProcAddress pointer.
// Prints "results=N not_supported=M".
#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdio.h>

static PFN_cuMipmappedArrayCreate_v5000 g_looked_up;
static int g_not_supported[8];

static void* worker(void* p) {
  int index = (int)(long)p;
  for (int i = 0; i < 50; ++i) {
    CUmipmappedArray array;
    CUDA_ARRAY3D_DESCRIPTOR desc = {64, 64, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    g_not_supported[index] += cuMipmappedArrayCreate(&array, &desc, 4) == CUDA_ERROR_NOT_SUPPORTED;
    g_not_supported[index] += g_looked_up(&array, &desc, 4) == CUDA_ERROR_NOT_SUPPORTED;
  }
  return NULL;
}

int main(void) {
  CUdriverProcAddressQueryResult status;
  if (cuGetProcAddress("cuMipmappedArrayCreate", (void**)&g_looked_up, 13000, 0, &status) != CUDA_SUCCESS ||
      g_looked_up == NULL)
    return 1;
  pthread_t threads[8];
  for (long i = 0; i < 8; ++i) pthread_create(&threads[i], NULL, worker, (void*)i);
  int total = 0;
  for (int i = 0; i < 8; ++i) {
    pthread_join(threads[i], NULL);
    total += g_not_supported[i];
  }
  // A second unimplemented function logs its own line.
  int other = cuGraphicsUnregisterResource(NULL) == CUDA_ERROR_NOT_SUPPORTED;
  printf("results=%d not_supported=%d other=%d\n", 8 * 50 * 2, total, other);
  return 0;
}
