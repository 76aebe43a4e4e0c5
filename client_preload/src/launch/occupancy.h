// The occupancy calculator's rules (occupancy.cpp), shared with the cluster
// questions (cluster_occupancy.cpp).
#pragma once
#include <cstddef>

#include "driver_headers.h"
#include "driver_objects.h"

namespace tally::client {

// A device attribute from the handshake snapshot, `fallback` when the device gave none.
int device_attribute(CUdevice_attribute a, int fallback);

// Blocks of `fn` of `block_size` threads that fit on one multiprocessor.
int blocks_per_sm(const FunctionObject* fn, int block_size, size_t dynamic_shared);

}  // namespace tally::client
