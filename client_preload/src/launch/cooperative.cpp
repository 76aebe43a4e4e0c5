// Cooperative launches (cuLaunchCooperativeKernel, cuLaunchKernelEx with
// CU_LAUNCH_ATTRIBUTE_COOPERATIVE): the kernel may synchronize its whole grid
// (cooperative groups' grid.sync()), so every block must be resident at once.
// The launch carries LaunchFlag::COOPERATIVE to the server, which never slices or
// preempts it and hands the device a grid barrier workspace. A grid larger than
// the device can hold at once fails here, as the driver does, with
// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: the occupancy calculator (the same
// answer cuOccupancyMaxActiveBlocksPerMultiprocessor gives the job) times the SMs.
// cuLaunchCooperativeKernelMultiDevice (deprecated) launches on the one device a
// tally job has.
#include "connection/connection.h"
#include "driver_objects.h"
#include "entry_points/entry_point.h"
#include "launch/launch.h"
#include "logging/log.h"

namespace tally::client {

uint32_t launch_flags(const CUlaunchConfig* config) {
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    // The last value given wins, as in the driver.
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) cooperative = config->attrs[i].value.cooperative != 0;
  }
  return cooperative ? static_cast<uint32_t>(protocol::LaunchFlag::COOPERATIVE) : 0;
}

CUresult check_cooperative_grid(CUfunction f, const FunctionObject* fn, unsigned gx, unsigned gy, unsigned gz,
                                unsigned block_threads, unsigned shared) {
  int per_sm = 0;
  if (CUresult rc = tally_entry_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050(
          &per_sm, f, static_cast<int>(block_threads), shared);
      rc != CUDA_SUCCESS)
    return rc;
  const int sms = Connection::instance().device().attributes[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT];
  const uint64_t resident = static_cast<uint64_t>(per_sm) * static_cast<uint64_t>(sms > 0 ? sms : 1);
  const uint64_t blocks = uint64_t{gx} * gy * gz;
  if (blocks <= resident) return CUDA_SUCCESS;
  log_error("cooperative launch of %s refused (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE): its grid of %llu blocks "
            "cannot all be resident at once; the device holds %d blocks of %u threads with %u bytes of dynamic "
            "shared memory per SM on %d SMs (%llu in all)",
            fn->name.c_str(), static_cast<unsigned long long>(blocks), per_sm, block_threads, shared, sms,
            static_cast<unsigned long long>(resident));
  return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
}

}  // namespace tally::client

using tally::client::launch_kernel;
using tally::client::kNoCluster;
using tally::client::cupti::LaunchCall;
using tally::protocol::LaunchFlag;

TALLY_ENTRY(cuLaunchCooperativeKernel_v9000)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                             unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                             unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                             void** kernelParams) {
  return launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                       kernelParams, nullptr, false, static_cast<uint32_t>(LaunchFlag::COOPERATIVE), kNoCluster,
                       LaunchCall::kCooperative);
}
TALLY_ENTRY(cuLaunchCooperativeKernel_v9000_ptsz)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                  unsigned int gridDimZ, unsigned int blockDimX,
                                                  unsigned int blockDimY, unsigned int blockDimZ,
                                                  unsigned int sharedMemBytes, CUstream hStream,
                                                  void** kernelParams) {
  return launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                       kernelParams, nullptr, true, static_cast<uint32_t>(LaunchFlag::COOPERATIVE), kNoCluster,
                       LaunchCall::kCooperativePtsz);
}

// A job under tally sees one device, so the list names one launch. Its default
// synchronizations order the kernel after all earlier work of the device's streams
// and all later work after the kernel; the host waits for each here (a context
// synchronization before, a stream synchronization after), which gives that order.
TALLY_ENTRY(cuLaunchCooperativeKernelMultiDevice_v9000)(CUDA_LAUNCH_PARAMS_v1* launchParamsList,
                                                        unsigned int numDevices, unsigned int flags) {
  constexpr unsigned kKnownFlags =
      CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC | CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC;
  if (launchParamsList == nullptr || numDevices == 0 || (flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (numDevices > 1) {
    tally::client::log_error("cuLaunchCooperativeKernelMultiDevice for %u devices refused (CUDA_ERROR_INVALID_VALUE): "
                             "a job under tally has one device", numDevices);
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUDA_LAUNCH_PARAMS_v1& p = launchParamsList[0];
  if ((flags & CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC) == 0) {
    if (CUresult rc = tally_entry_cuCtxSynchronize_v2000(); rc != CUDA_SUCCESS) return rc;
  }
  CUresult rc = launch_kernel(p.function, p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ,
                              p.sharedMemBytes, p.hStream, p.kernelParams, nullptr, false,
                              static_cast<uint32_t>(LaunchFlag::COOPERATIVE));
  if (rc != CUDA_SUCCESS || (flags & CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_POST_LAUNCH_SYNC) != 0) return rc;
  return tally_entry_cuStreamSynchronize_v2000(p.hStream);
}
