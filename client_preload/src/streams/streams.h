// Making streams, for the entry points that make them outside streams.cpp
// (cuGreenCtxStreamCreate, a green context's default stream).
#pragma once
#include "driver_headers.h"

namespace tally::client {

struct GreenContextObject;

// A stream with `flags` (CU_STREAM_NON_BLOCKING or 0) and `priority` (clamped to
// CUDA's range). With `green`, a stream of that green context: the server keeps its
// kernels to the context's SMs. Without, it belongs to the thread's current context
// (a created context destroys it with itself).
CUresult create_stream(CUstream* out, unsigned flags, int priority, GreenContextObject* green);

}  // namespace tally::client
