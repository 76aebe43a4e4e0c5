// Managed memory (cuMemAllocManaged): see managed_memory.cpp.
#pragma once
#include <cstdint>

namespace tally::client {

// Called once the server freed the managed allocation [start, start + size):
// unmaps the job's view of it and forgets its advice.
void forget_managed(uint64_t start, uint64_t size);

}  // namespace tally::client
