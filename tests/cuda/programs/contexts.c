// Contexts through the driver API as a CUDA 13 program makes them (cuda.h maps
// cuCtxCreate to cuCtxCreate_v4): driver_kernels PTX is loaded into two created
// contexts, each runs `iota`, then one is destroyed and what it owned goes with it.
//   contexts PTX
// Prints key=value lines (CUresults as numbers); exits 0 unless the setup itself fails.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "driver_check.h"

enum { N = 64 };

// Loads the PTX into the current context and fills a new allocation with start..start+N-1.
static void fill(const char* ptx, int start, CUmodule* mod, CUdeviceptr* out) {
  CUfunction iota;
  CHECK(cuModuleLoadData(mod, ptx));
  CHECK(cuModuleGetFunction(&iota, *mod, "iota"));
  CHECK(cuMemAlloc(out, N * sizeof(int)));
  int n = N;
  void* params[] = {out, &n, &start};
  CHECK(cuLaunchKernel(iota, 1, 1, 1, N, 1, 1, 0, NULL, params, NULL));
  CHECK(cuCtxSynchronize());
}

static int sum(CUdeviceptr p) {
  int host[N], total = 0;
  CHECK(cuMemcpyDtoH(host, p, sizeof host));
  for (int i = 0; i < N; ++i) total += host[i];
  return total;
}

static CUcontext g_shared;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static int g_stage = 0;

static void wait_stage(int stage) {
  pthread_mutex_lock(&g_lock);
  while (g_stage < stage) pthread_cond_wait(&g_cond, &g_lock);
  pthread_mutex_unlock(&g_lock);
}

static void set_stage(int stage) {
  pthread_mutex_lock(&g_lock);
  g_stage = stage;
  pthread_cond_broadcast(&g_cond);
  pthread_mutex_unlock(&g_lock);
}

// Makes g_shared current, waits until the main thread destroyed it, then uses it.
static void* other_thread(void* arg) {
  (void)arg;
  CHECK(cuCtxSetCurrent(g_shared));
  set_stage(1);
  wait_stage(2);
  CUcontext current = NULL;
  CUdeviceptr p = 0;
  CUresult got = cuCtxGetCurrent(&current);
  printf("other_get_current=%d other_is_shared=%d\n", (int)got, current == g_shared);
  CUresult sync = cuCtxSynchronize();
  CUresult alloc = cuMemAlloc(&p, 64);
  printf("other_sync=%d other_alloc=%d\n", (int)sync, (int)alloc);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  char* ptx = read_file(argv[1], NULL);
  CUdevice dev;
  CUcontext primary, a, b, current;
  CHECK(cuInit(0));
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&primary, dev));

  // A new context becomes current and reports what it was made with.
  CHECK(cuCtxCreate(&a, NULL, CU_CTX_SCHED_YIELD, dev));
  CHECK(cuCtxGetCurrent(&current));
  unsigned flags = 0, version = 0;
  unsigned long long id_a = 0, id_primary = 0;
  CHECK(cuCtxGetFlags(&flags));
  CHECK(cuCtxGetApiVersion(a, &version));
  CHECK(cuCtxGetId(a, &id_a));
  CHECK(cuCtxGetId(primary, &id_primary));
  printf("a_current=%d a_flags=%u a_api=%u ids_differ=%d\n", current == a, flags, version, id_a != id_primary);
  CHECK(cuCtxSetFlags(CU_CTX_SCHED_SPIN));
  CHECK(cuCtxGetFlags(&flags));
  printf("a_flags_set=%u\n", flags);

  // Settings are per context: a's stack size is not the primary context's.
  size_t stack_a = 0, stack_primary = 0;
  CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096));
  CHECK(cuCtxPushCurrent(primary));
  CHECK(cuCtxGetLimit(&stack_primary, CU_LIMIT_STACK_SIZE));
  CUcontext popped = NULL;
  CHECK(cuCtxPopCurrent(&popped));
  CHECK(cuCtxGetLimit(&stack_a, CU_LIMIT_STACK_SIZE));
  CHECK(cuCtxGetCurrent(&current));
  printf("stack_a=%zu stack_primary=%zu popped_primary=%d current_a_again=%d\n", stack_a, stack_primary,
         popped == primary, current == a);

  // An SM-count execution affinity is kept and reported back.
  CUexecAffinityParam affinity;
  memset(&affinity, 0, sizeof affinity);
  affinity.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
  affinity.param.smCount.val = 2;
  CUctxCreateParams params;
  memset(&params, 0, sizeof params);
  params.execAffinityParams = &affinity;
  params.numExecAffinityParams = 1;
  CHECK(cuCtxCreate(&b, &params, 0, dev));
  CUexecAffinityParam got;
  CHECK(cuCtxGetExecAffinity(&got, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
  printf("b_sm_count=%u\n", got.param.smCount.val);

  // Two contexts, each with its own module and memory.
  CUmodule mod_a, mod_b;
  CUdeviceptr out_a, out_b;
  fill(ptx, 1000, &mod_b, &out_b);
  CUstream stream_b;
  CUcontext stream_ctx = NULL;
  CHECK(cuStreamCreate(&stream_b, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamGetCtx(stream_b, &stream_ctx));
  CHECK(cuCtxPopCurrent(&popped));  // b off, a current again
  fill(ptx, 0, &mod_a, &out_a);
  printf("sum_a=%d sum_b=%d\n", sum(out_a), sum(out_b));
  CUcontext owner_a = NULL, owner_b = NULL;
  CHECK(cuPointerGetAttribute(&owner_a, CU_POINTER_ATTRIBUTE_CONTEXT, out_a));
  CHECK(cuPointerGetAttribute(&owner_b, CU_POINTER_ATTRIBUTE_CONTEXT, out_b));
  printf("owner_a=%d owner_b=%d stream_ctx_b=%d\n", owner_a == a, owner_b == b, stream_ctx == b);
  size_t free_before = 0, free_after = 0, total = 0;
  CHECK(cuMemGetInfo(&free_before, &total));

  // Destroying a releases its module and memory; b's go on working.
  CHECK(cuCtxDestroy(a));
  CHECK(cuCtxGetCurrent(&current));
  CHECK(cuMemGetInfo(&free_after, &total));
  CUfunction fn;
  int host[N];
  printf("after_destroy_current_null=%d freed=%d\n", current == NULL, free_after >= free_before + N * sizeof(int));
  CUresult a_module = cuModuleGetFunction(&fn, mod_a, "iota");
  CUresult a_memory = cuMemcpyDtoH(host, out_a, sizeof host);
  printf("a_module=%d a_memory=%d\n", (int)a_module, (int)a_memory);
  CHECK(cuCtxPushCurrent(b));
  printf("b_still=%d\n", sum(out_b));
  CHECK(cuModuleGetFunction(&fn, mod_b, "iota"));

  // Errors: a destroyed context cannot be used or destroyed again; the primary one is never destroyed.
  CUresult push_destroyed = cuCtxPushCurrent(a);
  CUresult destroy_again = cuCtxDestroy(a);
  CUresult destroy_primary = cuCtxDestroy(primary);
  CUresult destroy_null = cuCtxDestroy(NULL);
  printf("push_destroyed=%d destroy_again=%d destroy_primary=%d destroy_null=%d\n", (int)push_destroyed,
         (int)destroy_again, (int)destroy_primary, (int)destroy_null);
  unsigned long long id = 0;
  CUresult api_destroyed = cuCtxGetApiVersion(a, &version);
  CUresult id_destroyed = cuCtxGetId(a, &id);
  printf("api_destroyed=%d id_destroyed=%d\n", (int)api_destroyed, (int)id_destroyed);

  // Destroyed while current in another thread: that thread gets CONTEXT_IS_DESTROYED.
  CHECK(cuCtxCreate(&g_shared, NULL, 0, dev));
  pthread_t thread;
  pthread_create(&thread, NULL, other_thread, NULL);
  wait_stage(1);
  CHECK(cuCtxDestroy(g_shared));
  set_stage(2);
  pthread_join(thread, NULL);

  // Rejected parameters.
  CUctxCigParam cig;
  memset(&cig, 0, sizeof cig);
  CUctxCreateParams cig_params;
  memset(&cig_params, 0, sizeof cig_params);
  cig_params.cigParams = &cig;
  CUcontext unused;
  affinity.type = CU_EXEC_AFFINITY_TYPE_MAX;
  CUresult cig_rc = cuCtxCreate(&unused, &cig_params, 0, dev);
  CUresult bad_affinity = cuCtxCreate(&unused, &params, 0, dev);
  CUresult bad_flags = cuCtxCreate(&unused, NULL, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD, dev);
  printf("cig=%d bad_affinity=%d bad_flags=%d\n", (int)cig_rc, (int)bad_affinity, (int)bad_flags);

  // The older ABI versions, as a runtime fetches them by version.
  PFN_cuCtxCreate_v3020 create_v2 = NULL;
  PFN_cuCtxCreate_v11040 create_v3 = NULL;
  CUdriverProcAddressQueryResult found;
  CHECK(cuGetProcAddress("cuCtxCreate", (void**)&create_v2, 3020, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  CHECK(cuGetProcAddress("cuCtxCreate", (void**)&create_v3, 11040, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  CHECK(create_v2(&unused, CU_CTX_SCHED_BLOCKING_SYNC, dev));
  CHECK(cuCtxGetFlags(&flags));
  CHECK(cuCtxDestroy(unused));
  affinity.type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
  affinity.param.smCount.val = 100000;  // more SMs than the device has: rounded to what it has
  CHECK(create_v3(&unused, &affinity, 1, 0, dev));
  CHECK(cuCtxGetExecAffinity(&got, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
  int sms = 0;
  CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  printf("v2_flags=%u v3_sm_count_is_device=%d\n", flags, got.param.smCount.val == (unsigned)sms);
  CHECK(cuCtxDestroy(unused));
  CHECK(cuCtxDestroy(b));
  printf("done=1\n");
  return 0;
}
