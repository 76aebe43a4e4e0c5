// cuModuleGetLoadingMode: cudart asks it right after cuInit and picks eager or lazy
// module registration from the answer. CUDA's rule (CUDA_MODULE_LOADING, lazy by
// default since 12.2) is applied here in the client; the server loads what the
// job registers either way.
#include <cstdlib>
#include <cstring>

#include "connection/connection.h"
#include "entry_points/entry_point.h"

TALLY_ENTRY(cuModuleGetLoadingMode_v11070)(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = tally::client::Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  const char* env = std::getenv("CUDA_MODULE_LOADING");
  *mode = env != nullptr && std::strcmp(env, "EAGER") == 0 ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}
