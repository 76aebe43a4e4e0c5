// The driver API through tally, called directly (no cudart):
//   driver_api basics PTX FATBIN   modules from PTX text and a fatbin, launches
//                                  (kernelParams, `extra`, cuLaunchKernelEx), globals,
//                                  pitched memory and 2-D copies, memsets, unified
//                                  cuMemcpy, address queries, pointer attributes,
//                                  stream-ordered allocation, and addresses the job does
//                                  not own (each must fail with CUDA_ERROR_INVALID_VALUE
//                                  and change nothing)
//   driver_api owner               allocates and fills memory, prints its address, waits
//                                  for a line on stdin, then checks the bytes are intact
//   driver_api intruder ADDRESS    names another job's memory in copies, memset and free
//   driver_api load FILE KERNEL    loads a module file (cuModuleLoad) and resolves a kernel
//   driver_api quota               what cuMemGetInfo shows and how far allocation goes
//                                  (run with tally-run --memory-quota)
// Prints key=value lines; exits 0 unless the setup itself fails.
#include <cuda.h>
#include <cudaProfiler.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_check.h"

// Launches `scale` on x (n floats) through the given module and returns x[0..n).
static int run_scale(CUmodule mod, const char* how, float bias_value) {
  enum { N = 300 };
  CUfunction scale;
  CHECK(cuModuleGetFunction(&scale, mod, "scale"));
  CUdeviceptr bias;
  size_t bias_size = 0;
  CHECK(cuModuleGetGlobal(&bias, &bias_size, mod, "bias"));
  CHECK(cuMemcpyHtoD(bias, &bias_value, sizeof bias_value));
  float host[N];
  for (int i = 0; i < N; ++i) host[i] = (float)i;
  CUdeviceptr x;
  CHECK(cuMemAlloc(&x, sizeof host));
  CHECK(cuMemcpyHtoD(x, host, sizeof host));
  float factor = 2.0f;
  int n = N;
  if (strcmp(how, "params") == 0) {
    void* params[] = {&x, &factor, &n};
    CHECK(cuLaunchKernel(scale, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
  } else if (strcmp(how, "extra") == 0) {
    struct {
      CUdeviceptr x;
      float factor;
      int n;
    } block = {x, factor, n};
    size_t size = sizeof block;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &block, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    CHECK(cuLaunchKernel(scale, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, NULL, extra));
  } else {
    // Hints, a one-block cluster with a preferred substitute, and the two events a
    // kernel may trigger early (tally records them behind it).
    CUevent done, programmatic, timed;
    CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&programmatic, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&timed, 0));
    CUlaunchAttribute attrs[6];
    memset(attrs, 0, sizeof attrs);
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
    attrs[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[1].value.clusterDim.x = attrs[1].value.clusterDim.y = attrs[1].value.clusterDim.z = 1;
    attrs[2].id = CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION;
    attrs[2].value.preferredClusterDim.x = 2;
    attrs[2].value.preferredClusterDim.y = attrs[2].value.preferredClusterDim.z = 1;
    attrs[3].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[3].value.programmaticStreamSerializationAllowed = 1;
    attrs[4].id = CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
    attrs[4].value.launchCompletionEvent.event = done;
    attrs[5].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT;
    attrs[5].value.programmaticEvent.event = programmatic;
    CUlaunchConfig config;
    memset(&config, 0, sizeof config);
    config.gridDimX = (N + 127) / 128, config.gridDimY = 1, config.gridDimZ = 1;
    config.blockDimX = 128, config.blockDimY = 1, config.blockDimZ = 1;
    config.attrs = attrs, config.numAttrs = 6;
    void* params[] = {&x, &factor, &n};
    CHECK(cuLaunchKernelEx(&config, scale, params, NULL));
    CHECK(cuEventSynchronize(done));
    CHECK(cuEventSynchronize(programmatic));
    // A timing event cannot be a launch-completion event (CUDA's rule).
    attrs[4].value.launchCompletionEvent.event = timed;
    config.numAttrs = 5;
    printf("completion_event_with_timing=%d\n", (int)cuLaunchKernelEx(&config, scale, params, NULL));
    CHECK(cuEventDestroy(done));
    CHECK(cuEventDestroy(programmatic));
    CHECK(cuEventDestroy(timed));
  }
  CHECK(cuMemcpyDtoH(host, x, sizeof host));
  CHECK(cuMemFree(x));
  int good = 0;
  for (int i = 0; i < N; ++i) good += host[i] == 2.0f * i + bias_value;
  printf("scale_%s bias_size=%zu good=%d of %d\n", how, bias_size, good, N);
  return good;
}

static void modules(const char* ptx_path, const char* fatbin_path) {
  size_t size;
  char* ptx = read_file(ptx_path, &size);
  char* fatbin = read_file(fatbin_path, &size);
  CUmodule from_ptx, from_fatbin;
  CHECK(cuModuleLoadData(&from_ptx, ptx));
  CHECK(cuModuleLoadFatBinary(&from_fatbin, fatbin));
  run_scale(from_ptx, "params", 0.5f);
  run_scale(from_fatbin, "extra", 1.5f);
  run_scale(from_ptx, "ex", -1.0f);

  // Parameter layout with padding, as the server reported it.
  CUfunction mixed;
  CHECK(cuModuleGetFunction(&mixed, from_ptx, "mixed"));
  size_t offsets[4], sizes[4];
  for (int i = 0; i < 4; ++i) CHECK(cuFuncGetParamInfo(mixed, i, &offsets[i], &sizes[i]));
  printf("param_offsets=%zu,%zu,%zu,%zu sizes=%zu,%zu,%zu,%zu\n", offsets[0], offsets[1], offsets[2], offsets[3],
         sizes[0], sizes[1], sizes[2], sizes[3]);
  printf("param_info_past_end=%d\n", (int)cuFuncGetParamInfo(mixed, 4, &offsets[0], &sizes[0]));
  struct {
    char c;
    double d;
    int i;
  } m = {'m', 42.0, -7};
  char tag = 't';
  short s = 1234;
  CUdeviceptr out;
  CHECK(cuMemAlloc(&out, 5 * sizeof(int)));
  void* params[] = {&tag, &m, &out, &s};
  CHECK(cuLaunchKernel(mixed, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
  int got[5];
  CHECK(cuMemcpyDtoH(got, out, sizeof got));
  printf("mixed=%d,%d,%d,%d,%d\n", got[0], got[1], got[2], got[3], got[4]);
  int max_threads = 0;
  CHECK(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, mixed));
  printf("max_threads=%d\n", max_threads);
  int blocks = -1, min_grid = -1, best_block = -1;
  CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, mixed, 128, 0));
  CHECK(cuOccupancyMaxPotentialBlockSize(&min_grid, &best_block, mixed, NULL, 0, 0));
  printf("occupancy_128=%d best_block=%d min_grid=%d\n", blocks, best_block, min_grid);
  // Clusters: a cluster's blocks share one GPC's SMs (the emulator's 8 SMs are one);
  // the largest that fits is the portable 8. cuBLAS asks this when it creates a handle.
  CUlaunchAttribute cluster_attr;
  cluster_attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster_attr.value.clusterDim.x = 1;
  cluster_attr.value.clusterDim.y = 1;
  cluster_attr.value.clusterDim.z = 1;
  CUlaunchConfig cluster_config = {0};
  cluster_config.gridDimX = 8;
  cluster_config.gridDimY = cluster_config.gridDimZ = 1;
  cluster_config.blockDimX = 128;
  cluster_config.blockDimY = cluster_config.blockDimZ = 1;
  cluster_config.attrs = &cluster_attr;
  cluster_config.numAttrs = 1;
  int clusters_of_1 = -1, clusters_of_2 = -1, cluster_size = -1;
  CHECK(cuOccupancyMaxActiveClusters(&clusters_of_1, mixed, &cluster_config));
  cluster_attr.value.clusterDim.x = 2;
  CHECK(cuOccupancyMaxActiveClusters(&clusters_of_2, mixed, &cluster_config));
  CHECK(cuOccupancyMaxPotentialClusterSize(&cluster_size, mixed, &cluster_config));
  printf("clusters_of_1=%d clusters_of_2=%d cluster_size=%d\n", clusters_of_1, clusters_of_2, cluster_size);
  CUresult profiler_start = cuProfilerStart();
  printf("profiler=%d,%d\n", (int)profiler_start, (int)cuProfilerStop());
  printf("launch_too_many_threads=%d\n", (int)cuLaunchKernel(mixed, 1, 1, 1, 2048, 1, 1, 0, NULL, params, NULL));
  printf("launch_too_much_shared=%d\n",
         (int)cuLaunchKernel(mixed, 1, 1, 1, 32, 1, 1, 1 << 20, NULL, params, NULL));
  printf("launch_zero_grid=%d\n", (int)cuLaunchKernel(mixed, 0, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
  CUfunction missing;
  printf("missing_function=%d\n", (int)cuModuleGetFunction(&missing, from_ptx, "no_such_kernel"));
  CHECK(cuMemFree(out));
  CHECK(cuModuleUnload(from_ptx));
  CHECK(cuModuleUnload(from_fatbin));
  printf("launch_after_unload=%d\n", (int)cuLaunchKernel(mixed, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
  free(ptx);
  free(fatbin);
}

static void pitched(void) {
  enum { W = 20, H = 5 };  // ints
  CUdeviceptr p;
  size_t pitch = 0;
  CHECK(cuMemAllocPitch(&p, &pitch, W * sizeof(int), H, 4));
  CHECK(cuMemsetD2D32(p, pitch, 0xAAAAAAAAu, W, H));
  // Rows 1..3, columns 2..9 from a host array with its own pitch.
  int src[H][W + 3];
  for (int r = 0; r < H; ++r)
    for (int c = 0; c < W + 3; ++c) src[r][c] = r * 100 + c;
  CUDA_MEMCPY2D copy;
  memset(&copy, 0, sizeof copy);
  copy.srcMemoryType = CU_MEMORYTYPE_HOST, copy.srcHost = src, copy.srcPitch = sizeof src[0];
  copy.srcXInBytes = 2 * sizeof(int), copy.srcY = 1;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE, copy.dstDevice = p, copy.dstPitch = pitch;
  copy.dstXInBytes = 2 * sizeof(int), copy.dstY = 1;
  copy.WidthInBytes = 8 * sizeof(int), copy.Height = 3;
  CHECK(cuMemcpy2D(&copy));
  int back[H][W];
  CUDA_MEMCPY2D down;
  memset(&down, 0, sizeof down);
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE, down.srcDevice = p, down.srcPitch = pitch;
  down.dstMemoryType = CU_MEMORYTYPE_HOST, down.dstHost = back, down.dstPitch = sizeof back[0];
  down.WidthInBytes = sizeof back[0], down.Height = H;
  CHECK(cuMemcpy2D(&down));
  int good = 0;
  for (int r = 0; r < H; ++r)
    for (int c = 0; c < W; ++c) {
      int inside = r >= 1 && r <= 3 && c >= 2 && c < 10;
      good += back[r][c] == (inside ? r * 100 + c : (int)0xAAAAAAAAu);
    }
  printf("pitch=%zu pitched_good=%d of %d\n", pitch, good, W * H);
  // 16-bit memset of part of the first row.
  CHECK(cuMemsetD16(p + 4, 0x1234, 3));
  unsigned short row[6];
  CHECK(cuMemcpyDtoH(row, p, sizeof row));
  printf("memset16=%04x,%04x,%04x,%04x,%04x,%04x\n", row[0], row[1], row[2], row[3], row[4], row[5]);
  CHECK(cuMemFree(p));
}

static void unified_and_queries(void) {
  enum { N = 64 };
  CUdeviceptr a, b;
  CHECK(cuMemAlloc(&a, N * sizeof(int)));
  CHECK(cuMemAlloc(&b, N * sizeof(int)));
  int host[N], back[N];
  for (int i = 0; i < N; ++i) host[i] = i * i;
  CHECK(cuMemcpy(a, (CUdeviceptr)host, sizeof host));    // host -> device
  CHECK(cuMemcpy(b, a, sizeof host));                     // device -> device
  CHECK(cuMemcpy((CUdeviceptr)back, b, sizeof back));     // device -> host
  printf("unified_equal=%d\n", memcmp(host, back, sizeof host) == 0);

  CUdeviceptr base;
  size_t size;
  CHECK(cuMemGetAddressRange(&base, &size, a + 10));
  printf("range_ok=%d size=%zu\n", base == a && size == N * sizeof(int), size);
  unsigned type = 0;
  CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, b + 4));
  printf("memory_type=%u\n", type);
  printf("host_pointer_attribute=%d\n", (int)cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                                     (CUdeviceptr)host));
  // SYNC_MEMOPS, the one settable attribute: cleared, read back, set again; not on host memory
  unsigned sync_off = 0, sync_on = 1, sync_read = 7, sync_read_again = 7;
  CHECK(cuPointerSetAttribute(&sync_off, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, b));
  CHECK(cuPointerGetAttribute(&sync_read, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, b + 4));
  CHECK(cuPointerSetAttribute(&sync_on, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, b + 4));
  CHECK(cuPointerGetAttribute(&sync_read_again, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, b));
  printf("sync_memops=%u,%u\n", sync_read, sync_read_again);
  printf("set_attribute_bad=%d,%d\n",
         (int)cuPointerSetAttribute(&sync_off, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)host),
         (int)cuPointerSetAttribute(&sync_off, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, b));
  size_t free_bytes = 0, total = 0;
  CHECK(cuMemGetInfo(&free_bytes, &total));
  printf("meminfo_ok=%d\n", total > 0 && free_bytes <= total);

  // Stream-ordered allocation.
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr c;
  CHECK(cuMemAllocAsync(&c, 256, s));
  CHECK(cuMemsetD8Async(c, 0x5a, 256, s));
  unsigned char bytes[256];
  CHECK(cuMemcpyDtoHAsync(bytes, c, sizeof bytes, s));
  CHECK(cuMemFreeAsync(c, s));
  CHECK(cuStreamSynchronize(s));
  int all = 1;
  for (int i = 0; i < 256; ++i) all &= bytes[i] == 0x5a;
  printf("async_alloc_memset=%d\n", all);
  CHECK(cuStreamDestroy(s));
  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
}

// Every call names memory the job does not own; the job's own memory must be
// unchanged afterwards.
static void foreign(CUdeviceptr target, const char* prefix) {
  int junk[64];
  memset(junk, 0x77, sizeof junk);
  printf("%s_htod=%d\n", prefix, (int)cuMemcpyHtoD(target, junk, sizeof junk));
  printf("%s_dtoh=%d\n", prefix, (int)cuMemcpyDtoH(junk, target, sizeof junk));
  printf("%s_memset=%d\n", prefix, (int)cuMemsetD32(target, 0, 16));
  printf("%s_free=%d\n", prefix, (int)cuMemFree(target));
  printf("%s_unified=%d\n", prefix, (int)cuMemcpy(target, (CUdeviceptr)junk, sizeof junk));
  // Asynchronous: accepted at once, the failure comes back at the next synchronization.
  CUstream s;
  CHECK(cuStreamCreate(&s, 0));
  printf("%s_async_call=%d\n", prefix, (int)cuMemcpyHtoDAsync(target, junk, sizeof junk, s));
  printf("%s_async_sync=%d\n", prefix, (int)cuStreamSynchronize(s));
  printf("%s_sync_again=%d\n", prefix, (int)cuStreamSynchronize(s));
  CHECK(cuStreamDestroy(s));
}

static void ownership(void) {
  enum { N = 256 };
  CUdeviceptr mine;
  CHECK(cuMemAlloc(&mine, N));
  unsigned char pattern[N], back[N];
  for (int i = 0; i < N; ++i) pattern[i] = (unsigned char)(i * 7);
  CHECK(cuMemcpyHtoD(mine, pattern, N));
  foreign((CUdeviceptr)0xdead0000ull, "random");
  foreign(mine + N - 8, "overrun");   // starts inside, runs past the end
  printf("free_interior=%d\n", (int)cuMemFree(mine + 8));
  CUdeviceptr other;
  printf("dtod_foreign_src=%d\n", (int)cuMemcpyDtoD(mine, 0xdead0000ull, 16));
  CHECK(cuMemAlloc(&other, 16));
  CHECK(cuMemFree(other));
  printf("use_after_free=%d\n", (int)cuMemcpyHtoD(other, pattern, 16));
  printf("double_free=%d\n", (int)cuMemFree(other));
  CHECK(cuMemcpyDtoH(back, mine, N));
  printf("own_intact=%d\n", memcmp(back, pattern, N) == 0);
  CHECK(cuMemFree(mine));
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  setbuf(stdout, NULL);
  setup();
  if (strcmp(argv[1], "basics") == 0 && argc == 4) {
    modules(argv[2], argv[3]);
    pitched();
    unified_and_queries();
    ownership();
    CHECK(cuCtxSynchronize());
  } else if (strcmp(argv[1], "owner") == 0) {
    enum { N = 4096 };
    CUdeviceptr p;
    CHECK(cuMemAlloc(&p, N));
    CHECK(cuMemsetD8(p, 0x3c, N));
    printf("owner_ptr=0x%llx\n", (unsigned long long)p);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    unsigned char back[N];
    CHECK(cuMemcpyDtoH(back, p, N));
    int intact = 1;
    for (int i = 0; i < N; ++i) intact &= back[i] == 0x3c;
    printf("owner_intact=%d\n", intact);
  } else if (strcmp(argv[1], "load") == 0 && argc == 4) {
    CUmodule mod;
    CUfunction fn;
    CUresult rc = cuModuleLoad(&mod, argv[2]);
    printf("load_rc=%d\n", (int)rc);
    if (rc == CUDA_SUCCESS) printf("resolve_rc=%d\n", (int)cuModuleGetFunction(&fn, mod, argv[3]));
  } else if (strcmp(argv[1], "quota") == 0) {
    size_t free_bytes = 0, total = 0;
    CHECK(cuMemGetInfo(&free_bytes, &total));
    printf("quota_total=%zu quota_free=%zu\n", total, free_bytes);
    CUdeviceptr a, b;
    printf("alloc_half=%d\n", (int)cuMemAlloc(&a, total / 2));
    printf("alloc_too_much=%d\n", (int)cuMemAlloc(&b, total / 2 + 4096));
    CHECK(cuMemGetInfo(&free_bytes, &total));
    printf("quota_free_after=%zu\n", free_bytes);
    CHECK(cuMemFree(a));
    printf("alloc_after_free=%d\n", (int)cuMemAlloc(&b, total / 2 + 4096));
  } else if (strcmp(argv[1], "intruder") == 0 && argc == 3) {
    foreign((CUdeviceptr)strtoull(argv[2], NULL, 0), "intruder");
  } else {
    return 2;
  }
  printf("done\n");
  return 0;
}
