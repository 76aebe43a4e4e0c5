// Tools context (21318c60-9714-3248-8ca6-41ff7324c8f2): cudart 13.5 fetches it at
// initialization and gives up (cudaErrorSymbolNotFound on every call) when the
// driver has no such table, as it does for CUDA_ERROR_NOT_FOUND and
// CUDA_ERROR_INVALID_VALUE alike (tried 2026-12-03). CUPTI 13.0 names the same
// UUID, so a CUDA 13.0 driver has it. Read from cudart 13.5's code: it calls only
// slots 39 and 51 (byte offsets 0x138 and 0x198), 57 call sites each, and only on
// API paths where the tools hooks flags (what the tools runtime hooks table fills)
// say a tool subscribed, which tally never says. So a sized table of logging slots
// is what such a runtime needs; a call into it would be logged, never a jump to
// garbage.
#include "export_tables/export_tables.h"
#include "export_tables/unknown_slot.h"

namespace tally::client::export_tables {
namespace {

constexpr char kName[] = "tools context";

}  // namespace

Table tools_context() {
  static const PaddedTable<kName> table(PaddedTable<kName>::kSizeHeader, {});
  return table.slots();
}

}  // namespace tally::client::export_tables
