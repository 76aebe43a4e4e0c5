// Context checks (263e8860-...): slot 2 is asked about a context before cudart uses
// it, slot 3 one global value; cudart needs the table to exist.
//
// Slot 2 (context, &result, &replacement): cudart 13.0's cudaDeviceSynchronize (read
// from its code) takes cuCtxGetCurrent's context, asks slot 2 about it, and when
// *result is 1 goes on with *replacement instead (cuCtxSynchronize_v2(replacement)).
// On a thread with no current context (a worker that never called cudaSetDevice
// nor anything else that needs a context) the check is asked about nullptr, and the
// driver must name the primary context there, as programs that synchronize from
// worker threads work natively (docs/export-tables.md, "Worker threads"). For a
// context that exists the real driver answers 0 in every case observed.
#include <cstdint>

#include "contexts/contexts.h"
#include "export_tables/export_tables.h"
#include "export_tables/unknown_slot.h"
#include "driver_headers.h"
#include "logging/trace.h"

namespace tally::client::export_tables {
namespace {

constexpr char kName[] = "context checks";

CUresult context_check(CUcontext ctx, uint32_t* result, const void** detail) {
  CUcontext replacement = ctx == nullptr ? active_primary_context() : nullptr;
  if (result != nullptr) *result = replacement != nullptr ? 1 : 0;
  if (detail != nullptr) *detail = replacement;
  trace_line("context checks: context %p -> %p", static_cast<void*>(ctx), static_cast<void*>(replacement));
  return CUDA_SUCCESS;
}

uint32_t global_check() { return 0; }

}  // namespace

Table context_checks() {
  static const PaddedTable<kName> table(
      PaddedTable<kName>::kSizeHeader,
      {nullptr, reinterpret_cast<const void*>(&context_check), reinterpret_cast<const void*>(&global_check)});
  return table.slots();
}

}  // namespace tally::client::export_tables
