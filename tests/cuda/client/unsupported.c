// Calls an entry point tally does not implement from several threads, through the
// exported symbol and through a cuGetProcAddress pointer.
// Prints "results=N not_supported=M".
#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdio.h>

static PFN_cuArrayCreate_v3020 g_looked_up;
static int g_not_supported[8];

static void* worker(void* p) {
  int index = (int)(long)p;
  for (int i = 0; i < 50; ++i) {
    CUarray array;
    CUDA_ARRAY_DESCRIPTOR desc = {64, 64, CU_AD_FORMAT_FLOAT, 1};
    g_not_supported[index] += cuArrayCreate(&array, &desc) == CUDA_ERROR_NOT_SUPPORTED;
    g_not_supported[index] += g_looked_up(&array, &desc) == CUDA_ERROR_NOT_SUPPORTED;
  }
  return NULL;
}

int main(void) {
  CUdriverProcAddressQueryResult status;
  if (cuGetProcAddress("cuArrayCreate", (void**)&g_looked_up, 13000, 0, &status) != CUDA_SUCCESS ||
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
