// cuGetProcAddress: how cudart (and Triton, cuBLAS, JAX...) find every driver
// function. Semantics follow the cuda.h documentation of CUDA 13.0.
#include <cstring>

#include "contexts/driver_version.h"
#include "entry_points/entry_point.h"
#include "entry_points/entry_table.h"
#include "logging/trace.h"

namespace tally::client {
namespace {

const EntryPoint* rows_begin() { return kEntryPoints; }
const EntryPoint* rows_end() { return kEntryPoints + kEntryCount; }

// The newest row in [first, last) (one name, one variant, sorted by version) whose
// version is <= cuda_version.
const EntryPoint* newest_at_most(const EntryPoint* first, const EntryPoint* last, int cuda_version) {
  const EntryPoint* best = nullptr;
  for (const EntryPoint* row = first; row != last && row->version <= cuda_version; ++row) best = row;
  return best;
}

}  // namespace

EntryLookup lookup_entry(const char* name, int cuda_version, bool per_thread_stream) {
  // Rows are sorted by name first; find this name's block.
  const EntryPoint* lo = rows_begin();
  const EntryPoint* hi = rows_end();
  while (lo < hi) {
    const EntryPoint* mid = lo + (hi - lo) / 2;
    if (std::strcmp(mid->name, name) < 0) lo = mid + 1; else hi = mid;
  }
  const EntryPoint* end = lo;
  while (end != rows_end() && std::strcmp(end->name, name) == 0) ++end;
  if (lo == end) return {nullptr, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND};
  // Within the block: legacy rows, then per-thread rows, each by ascending version.
  const EntryPoint* split = lo;
  while (split != end && !split->per_thread_stream) ++split;
  const EntryPoint* chosen = nullptr;
  if (per_thread_stream) chosen = newest_at_most(split, end, cuda_version);
  if (chosen == nullptr) chosen = newest_at_most(lo, split, cuda_version);
  if (chosen == nullptr) return {nullptr, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT};
  return {chosen, CU_GET_PROC_ADDRESS_SUCCESS};
}

namespace {

CUresult get_proc_address(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  constexpr cuuint64_t kKnownFlags =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~kKnownFlags) != 0 || cuda_version > reported_driver_version()) {
    trace_line("cuGetProcAddress %s %d flags=%llu -> invalid value", symbol, cuda_version,
               static_cast<unsigned long long>(flags));
    return CUDA_ERROR_INVALID_VALUE;
  }
  // DEFAULT (0) means per-thread only for code built with per-thread default
  // streams, and such code sets the flag itself (cuda.h's cuGetProcAddress_v2_ptsz).
  bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  EntryLookup found = lookup_entry(symbol, cuda_version, per_thread);
  if (status != nullptr) *status = found.status;
  if (found.entry == nullptr) {
    trace_line("cuGetProcAddress %s %d flags=%llu -> %s", symbol, cuda_version,
               static_cast<unsigned long long>(flags),
               found.status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "version not sufficient"
                                                                          : "symbol not found");
    return CUDA_ERROR_NOT_FOUND;
  }
  bool traced = trace_calls();
  *pfn = traced ? found.entry->traced_function : found.entry->function;
  if (traced) {
    trace_line("cuGetProcAddress %s %d flags=%llu -> %s%s", symbol, cuda_version,
               static_cast<unsigned long long>(flags), found.entry->symbol,
               found.entry->implemented ? "" : " (not supported)");
  }
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace tally::client

TALLY_ENTRY(cuGetProcAddress_v12000)(const char* symbol, void** pfn, int driverVersion, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* symbolFound) {
  CUresult rc = tally::client::get_proc_address(symbol, pfn, driverVersion, flags, symbolFound);
  // Documented for _v2: a symbol that is missing or too new is CUDA_SUCCESS with a
  // NULL pointer; symbolFound says which.
  return rc == CUDA_ERROR_NOT_FOUND ? CUDA_SUCCESS : rc;
}

TALLY_ENTRY(cuGetProcAddress_v11030)(const char* symbol, void** pfn, int driverVersion, cuuint64_t flags) {
  // The first form has no status out-parameter and reports a miss as CUDA_ERROR_NOT_FOUND.
  return tally::client::get_proc_address(symbol, pfn, driverVersion, flags, nullptr);
}
