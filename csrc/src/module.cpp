// Entry point of tally._core; the bindings themselves live beside their concepts.
#include <algorithm>
#include <cstring>

#include "module_registry.h"
#include "tally/protocol_generated.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "tally's C++ core: shared-memory transport, emulator hot loop";
  m.attr("PROTOCOL_VERSION") = tally::protocol::kProtocolVersion;
  m.attr("SEGMENT_MAGIC") = tally::protocol::kSegmentMagic;
  // In name order, whatever order the binding files' static registrars ran in: a
  // class is bound after its base (data_plane's Issuer before data_plane.*_issuer's).
  auto bindings = tally::module_bindings();
  std::sort(bindings.begin(), bindings.end(),
            [](const auto& a, const auto& b) { return std::strcmp(a.first, b.first) < 0; });
  for (auto& [name, bind] : bindings) bind(m);
}
