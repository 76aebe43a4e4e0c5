#include "entry_points/unsupported.h"

#include "logging/log.h"

namespace tally::client {

CUresult unsupported_entry(OnceFlag& logged, const char* symbol, const char* reason) {
  if (logged.first()) {
    log_error("%s is not supported by tally (%s); it returns CUDA_ERROR_NOT_SUPPORTED "
              "(reported once per function)", symbol, reason);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace tally::client
