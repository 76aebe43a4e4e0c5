// Context-local storage (c693336e-...): cudart keeps its per-context state in the
// driver, keyed by a pointer of its own. Slot 0 stores (context, key) -> value with
// a destructor callback, slot 2 looks it up (cudart does so on every API call),
// slot 1 removes (context, key) when cudart tears its state down (arguments
// measured with cudart 13.0: our primary context's handle and the key it put).
// This table has no size word: slot 0 is a function.
// A NULL context means the calling thread's current context; cudart never makes
// one current itself, so without one the primary context is meant.
#include <map>
#include <mutex>
#include <utility>

#include "contexts/contexts.h"
#include "entry_points/entry_point.h"
#include "export_tables/export_tables.h"
#include "export_tables/unknown_slot.h"
#include "logging/trace.h"

namespace tally::client::export_tables {
namespace {

using Destructor = void (*)(CUcontext, void*, void*);

struct Stored {
  void* value;
  Destructor destructor;  // kept for context teardown (cuDevicePrimaryCtxReset), not called yet
};

std::mutex g_mutex;
std::map<std::pair<CUcontext, void*>, Stored>& storage() {
  static auto* map = new std::map<std::pair<CUcontext, void*>, Stored>();  // outlives exit handlers
  return *map;
}

CUresult resolve(CUcontext ctx, CUcontext* out) {
  if (ctx != nullptr) {
    *out = ctx;
    return CUDA_SUCCESS;
  }
  if (tally_entry_cuCtxGetCurrent_v4000(out) == CUDA_SUCCESS && *out != nullptr) return CUDA_SUCCESS;
  return primary_context(0, out);
}

CUresult put(CUcontext ctx, void* key, void* value, Destructor destructor) {
  CUcontext resolved = nullptr;
  if (CUresult rc = resolve(ctx, &resolved); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(g_mutex);
  storage()[{resolved, key}] = Stored{value, destructor};
  trace_line("context-local storage: put %p for context %p", key, static_cast<void*>(resolved));
  return CUDA_SUCCESS;
}

CUresult remove(CUcontext ctx, void* key) {
  CUcontext resolved = nullptr;
  if (CUresult rc = resolve(ctx, &resolved); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(g_mutex);
  bool found = storage().erase({resolved, key}) != 0;
  trace_line("context-local storage: remove %p for context %p%s", key, static_cast<void*>(resolved),
             found ? "" : " (absent)");
  return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult get(void** value, CUcontext ctx, void* key) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUcontext resolved = nullptr;
  if (CUresult rc = resolve(ctx, &resolved); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = storage().find({resolved, key});
  if (it == storage().end()) {
    trace_line("context-local storage: get %p for context %p -> absent", key, static_cast<void*>(resolved));
    return CUDA_ERROR_INVALID_VALUE;
  }
  *value = it->second.value;
  return CUDA_SUCCESS;
}

constexpr char kName[] = "context-local storage";

}  // namespace

// This table has no size header: slot 0 is put.
Table context_local_storage() {
  static const PaddedTable<kName> table(PaddedTable<kName>::kNoHeader,
                                        {reinterpret_cast<const void*>(&put), reinterpret_cast<const void*>(&remove),
                                         reinterpret_cast<const void*>(&get)});
  return table.slots();
}

}  // namespace tally::client::export_tables
