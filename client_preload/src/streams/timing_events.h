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
CUresult synchronize_timing_event(uint64_t event);
// Milliseconds from `reference` (completed) to each of `count` events, in one
// request: NaN for an event whose work is not complete yet, +inf for one that cannot
// be timed (its stream failed). At most kTimingEventsPerRequest events.
constexpr uint32_t kTimingEventsPerRequest = 512;
CUresult timing_event_times(uint64_t reference, const uint64_t* events, uint32_t count, double* ms);
void destroy_timing_event(uint64_t event);

}  // namespace tally::client
