// The errors after which a CUDA context is unusable (CUDA's "sticky" errors): once a
// kernel of the process faulted, every later call that reaches the device returns
// the same error, until the context is reset (cuDevicePrimaryCtxReset, what
// cudaDeviceReset calls). cuda.h documents each of these as leaving "the process in
// an inconsistent state" where "any further CUDA work will return the same error",
// and CUDA_ERROR_ASSERT as "the context cannot be used anymore". The server keeps
// the same list (tally/protocol/errors.py: CONTEXT_FAULT_CODES).
#pragma once
#include "driver_headers.h"

namespace tally::client {

inline bool is_context_fault(CUresult status) {
  switch (status) {
    case CUDA_ERROR_CONTAINED:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
    case CUDA_ERROR_EXTERNAL_DEVICE:
      return true;
    default:
      return false;
  }
}

}  // namespace tally::client
