// Bulk bytes for one request (a module image, a linker input): up to
// kInlineRequestBytes ride in the request's tail; larger ones go first through the
// upload arena, in chunks, into the session's staging buffer on the server
// (StageBytes), and the request then says `staged`. One staged transfer at a time:
// hold staging_mutex() from the first chunk until the request that takes the
// buffer is answered.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "driver_headers.h"

namespace tally::client {

constexpr size_t kInlineRequestBytes = 64 << 10;

std::mutex& staging_mutex();

// Appends `size` bytes to the staging buffer (the caller holds staging_mutex()).
CUresult stage_bytes(const uint8_t* data, size_t size);

}  // namespace tally::client
