// The JIT linker, client side (cuLink*). The server links (tally/server/driver/
// linker.py says why); the client keeps what the application sees: the options it
// passed (log buffers it owns, output slots it reads back) and the linked image,
// which lives as long as its link state.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "driver_headers.h"

namespace tally::client {

// One input of a link tally makes for itself, as cuLinkAddData takes it.
struct LinkInputBytes {
  CUjitInputType type;
  const uint8_t* data;
  size_t size;
  std::string name;
};

// Links `inputs` on the server, as cuLinkCreate/AddData/Complete would (with
// CU_JIT_MAX_REGISTERS `max_registers`, 0 for none), without a link state the
// application sees (nor a current context): *image is the linked PTX,
// *error what the server said when it failed. Connects to the server first if the job
// has not yet (as cuInit does).
CUresult link_through_server(const std::vector<LinkInputBytes>& inputs, unsigned max_registers,
                             std::vector<uint8_t>* image, std::string* error);

// Links an -rdc program's relocatable fatbins (the NULL-terminated array a version-2
// fatbin wrapper points at) into one image for the module loader.
CUresult link_relocatable_fatbins(const uint64_t* fatbins, std::vector<uint8_t>* image);

}  // namespace tally::client
