// Events the client records for itself, on the job's streams, to time device work
// (tally's CUPTI: cupti/device_work.cpp). They are never CUevents of the job: only
// their ids travel, so the job's event handles and its count of live events are
// untouched. Each call is what the matching cuEvent* call sends.
#pragma once
#include <cstdint>

#include "driver_headers.h"

namespace tally::client {

// A fresh timing event (created on the server; fire-and-forget), or 0 on failure.
uint64_t create_timing_event();
// Records `event` on the wire stream `stream` (a stream_id() result).
CUresult record_timing_event(uint64_t event, uint64_t stream);
// CUDA_SUCCESS once the work before the event is done, CUDA_ERROR_NOT_READY before.
CUresult query_timing_event(uint64_t event);
CUresult synchronize_timing_event(uint64_t event);
// Milliseconds from `start` to `end`, both completed (the server's double, unrounded).
CUresult timing_event_elapsed(uint64_t start, uint64_t end, double* ms);
void destroy_timing_event(uint64_t event);

}  // namespace tally::client
