// The one body behind the generated cuMemsetD* entries (memset_entry.h).
#include "memory/memset_entry.h"

#include "connection/connection.h"
#include "copies/copies.h"
#include "streams/stream_ids.h"

namespace tally::client {

CUresult memset_entry(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned element_size, size_t width,
                      size_t height, CUstream stream, bool per_thread, bool async) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  // The driver requires element alignment of the destination (and pitch).
  if (dst % element_size != 0 || (height > 1 && pitch % element_size != 0)) return CUDA_ERROR_INVALID_VALUE;
  return memset_device({dst, pitch}, value, element_size, width, height, id, async);
}

}  // namespace tally::client
