#include "connection/staged_bytes.h"

#include <algorithm>
#include <cstring>

#include "connection/connection.h"

namespace tally::client {

std::mutex& staging_mutex() {
  static std::mutex m;
  return m;
}

CUresult stage_bytes(const uint8_t* data, size_t size) {
  Connection& c = Connection::instance();
  const size_t chunk = static_cast<size_t>(std::min<uint64_t>(c.upload_capacity() / 4, 16 << 20));
  for (size_t at = 0; at < size; at += chunk) {
    const size_t n = std::min(chunk, size - at);
    std::lock_guard<std::mutex> lock(c.upload_mutex());
    protocol::StageBytesMsg stage{0, n};
    uint8_t* dst = nullptr;
    if (CUresult rc = c.reserve_upload(n, &stage.arena_offset, &dst); rc != CUDA_SUCCESS) return rc;
    std::memcpy(dst, data + at, n);
    if (CUresult rc = c.send(stage); rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}

}  // namespace tally::client
