// How a CUstream the job passes becomes the stream id the server knows.
//   NULL                   the legacy default stream (id 0), or, through a _ptsz/_ptds
//                          entry point, the calling thread's per-thread default stream
//   CU_STREAM_LEGACY       the legacy default stream
//   CU_STREAM_PER_THREAD   the calling thread's per-thread default stream
//   anything else          a stream made by cuStreamCreate* (a StreamObject)
#pragma once
#include <cstdint>

#include "driver_headers.h"

namespace tally::client {

constexpr uint64_t kLegacyStream = 0;
constexpr uint64_t kPerThreadStreamBit = uint64_t{1} << 62;  // spec.PER_THREAD_STREAM_BIT
// Streams only the client knows, whose work is always captured (capture.h:
// record_on_private_stream); the server never hears of them.
constexpr uint64_t kPrivateStreamBit = uint64_t{1} << 61;

// CUDA_ERROR_INVALID_HANDLE for a handle that is not a live stream.
CUresult stream_id(CUstream stream, bool per_thread_entry, uint64_t* id);

// The calling thread's per-thread default stream.
uint64_t per_thread_stream_id();

}  // namespace tally::client
