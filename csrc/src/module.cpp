// Entry point of tally._core; the bindings themselves live beside their concepts.
#include "module_registry.h"
#include "tally/protocol_generated.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "tally's C++ core: shared-memory transport, emulator hot loop";
  m.attr("PROTOCOL_VERSION") = tally::protocol::kProtocolVersion;
  m.attr("SEGMENT_MAGIC") = tally::protocol::kSegmentMagic;
  for (auto& [name, bind] : tally::module_bindings()) bind(m);
}
