// The JIT linker, client side (cuLink*). The server links (tally/server/driver/
// linker.py says why); the client keeps what the application sees: the options it
// passed (log buffers it owns, output slots it reads back) and the linked image,
// which lives as long as its link state.
#pragma once
#include <cstdint>
#include <vector>

#include "driver_headers.h"

namespace tally::client {

// Links an -rdc program's relocatable fatbins (the NULL-terminated array a version-2
// fatbin wrapper points at) into one image for the module loader.
CUresult link_relocatable_fatbins(const uint64_t* fatbins, std::vector<uint8_t>* image);

}  // namespace tally::client
