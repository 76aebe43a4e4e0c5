// What the client remembers of its physical-memory handles (virtual_memory.cpp makes
// and releases them, shareable_handles.cpp exports, imports and retains them): the
// properties they were made with (cuMemGetAllocationPropertiesFromHandle, and
// whether a handle may be exported), and how many references the job holds.
#pragma once

#include "driver_headers.h"

namespace tally::client {

// A handle the server gave (made, imported or retained): one more reference.
void remember_handle(CUmemGenericAllocationHandle handle, const CUmemAllocationProp& prop);

// One reference released; the properties go with the last.
void forget_handle(CUmemGenericAllocationHandle handle);

// The properties `handle` was made with; false for a handle the job does not hold.
bool handle_props(CUmemGenericAllocationHandle handle, CUmemAllocationProp* prop);

}  // namespace tally::client
