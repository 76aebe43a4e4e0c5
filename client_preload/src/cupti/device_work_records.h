// device_work.cpp's side that speaks CUPTI's types, for the rest of tally's CUPTI
// (the API files and cupti_state.cpp).
#pragma once
#include <cstdint>

#include "cupti/cupti_headers.h"

namespace tally::client::cupti {

// Turns finished work into records (cupti_state.cpp calls it at a flush). With
// `forced`, waits for unfinished work; otherwise leaves it for a later flush.
void resolve_device_work(bool forced);

// The calling thread's external correlation ids (cuptiActivityPush/Pop...): a
// stack per kind; each timed call names the top of every non-empty one.
CUptiResult push_external_correlation(CUpti_ExternalCorrelationKind kind, uint64_t id);
CUptiResult pop_external_correlation(CUpti_ExternalCorrelationKind kind, uint64_t* last);

// The ids a record names: the current context's (cuCtxGetId's) and a wire stream's.
uint32_t current_context_id();
uint32_t stream_record_id(uint64_t stream);

}  // namespace tally::client::cupti
