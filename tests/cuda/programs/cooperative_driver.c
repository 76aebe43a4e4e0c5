// Cooperative launches through the driver API (no cudart):
//   cooperative_driver PTX   loads cooperative_kernels.cu's PTX; reads the device
//                            attributes; launches its grid-barrier kernel with
//                            cuLaunchCooperativeKernel and with
//                            cuLaunchCooperativeKernelMultiDevice on the one device
//                            (with and without its synchronizations), checking the
//                            result of each; and what must be refused (two devices,
//                            unknown flags, a grid too large to be resident at once).
#define CUDA_ENABLE_DEPRECATED  // cuLaunchCooperativeKernelMultiDevice is deprecated, and tested here
#include <cuda.h>
#include <string.h>

#include "driver_check.h"

enum { kThreads = 64, kRounds = 4, kMaxBlocks = 4096 };

static int values_host[kMaxBlocks];

// Blocks whose value differs from a host computation of the rounds.
static int wrong_blocks(CUdeviceptr values, int blocks) {
  static long long expect[kMaxBlocks], next[kMaxBlocks];
  for (int b = 0; b < blocks; ++b) expect[b] = b;
  for (int r = 0; r < kRounds; ++r) {
    for (int b = 0; b < blocks; ++b) next[b] = expect[b] + expect[(b + blocks - 1) % blocks];
    memcpy(expect, next, sizeof(long long) * blocks);
  }
  CHECK(cuMemcpyDtoH(values_host, values, sizeof(int) * blocks));
  int wrong = 0;
  for (int b = 0; b < blocks; ++b) wrong += values_host[b] != (int)expect[b];
  return wrong;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  setup();
  CUmodule module;
  CUfunction fn;
  CHECK(cuModuleLoadData(&module, read_file(argv[1], NULL)));
  CHECK(cuModuleGetFunction(&fn, module, "ring_rounds"));
  int cooperative = 0, multi_device = 0, sms = 0, per_sm = 0;
  CHECK(cuDeviceGetAttribute(&cooperative, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0));
  CHECK(cuDeviceGetAttribute(&multi_device, CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH, 0));
  CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kThreads, 0));
  printf("cooperative_attribute=%d multi_device_attribute=%d\n", cooperative, multi_device);
  const int largest = per_sm * sms, blocks = 2 * sms < largest ? 2 * sms : largest;
  if (largest + 1 > kMaxBlocks) return 2;

  CUdeviceptr values, scratch;
  CHECK(cuMemAlloc(&values, sizeof(int) * kMaxBlocks));
  CHECK(cuMemAlloc(&scratch, sizeof(int) * kMaxBlocks));
  int rounds = kRounds;
  void* args[] = {&values, &scratch, &rounds};
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  CHECK(cuLaunchCooperativeKernel(fn, blocks, 1, 1, kThreads, 1, 1, 0, stream, args));
  CHECK(cuStreamSynchronize(stream));
  const int launch_wrong = wrong_blocks(values, blocks);

  CUDA_LAUNCH_PARAMS params = {fn, (unsigned)blocks, 1, 1, kThreads, 1, 1, 0, stream, args};
  // No synchronization of ours: the default synchronizations order the launch after
  // the memset on the legacy stream and the copy that reads its result after it.
  CHECK(cuMemsetD32(values, 0, kMaxBlocks));
  CHECK(cuLaunchCooperativeKernelMultiDevice(&params, 1, 0));
  const int multi_wrong = wrong_blocks(values, blocks);
  // Without them the launch is ordered after nothing on other streams (the memset on
  // the legacy stream is waited for here) and nothing waits for it but its own stream.
  CHECK(cuMemsetD32(values, 0, kMaxBlocks));
  CHECK(cuCtxSynchronize());
  CHECK(cuLaunchCooperativeKernelMultiDevice(&params, 1, CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC |
                                                             CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC));
  CHECK(cuStreamSynchronize(stream));
  printf("launch_wrong=%d multi_wrong=%d multi_unsynchronized_wrong=%d\n", launch_wrong, multi_wrong,
         wrong_blocks(values, blocks));

  CUDA_LAUNCH_PARAMS two[2] = {params, params};
  const int two_devices = (int)cuLaunchCooperativeKernelMultiDevice(two, 2, 0);
  const int unknown_flags = (int)cuLaunchCooperativeKernelMultiDevice(&params, 1, 4);
  const int too_large = (int)cuLaunchCooperativeKernel(fn, largest + 1, 1, 1, kThreads, 1, 1, 0, stream, args);
  params.gridDimX = largest + 1;
  const int multi_too_large = (int)cuLaunchCooperativeKernelMultiDevice(&params, 1, 0);
  printf("two_devices=%d unknown_flags=%d too_large=%d multi_too_large=%d\n", two_devices, unknown_flags, too_large,
         multi_too_large);
  CHECK(cuStreamDestroy(stream));
  CHECK(cuMemFree(values));
  CHECK(cuMemFree(scratch));
  return 0;
}
