// Contexts as the job sees them. The server runs every job in its own context, so
// a job's contexts are the client's bookkeeping: one primary context per device
// (its handle is the address of a PrimaryContext) and each thread's stack of
// current contexts. Created contexts (cuCtxCreate) are not supported yet.
#pragma once
#include "driver_headers.h"

namespace tally::client {

// The primary context of `dev`, marked active (cudart obtains it this way, through
// the runtime-interface export table, instead of cuDevicePrimaryCtxRetain).
CUresult primary_context(CUdevice dev, CUcontext* out);

// The device of `ctx` (nullptr: the calling thread's current context).
CUresult context_device(CUcontext ctx, CUdevice* out);

}  // namespace tally::client
