#include "contexts/driver_version.h"

#include "entry_points/entry_point.h"

namespace tally::client {

int reported_driver_version() { return kEntryTableCudaVersion; }

}  // namespace tally::client

TALLY_ENTRY(cuDriverGetVersion_v2020)(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = tally::client::reported_driver_version();
  return CUDA_SUCCESS;
}
