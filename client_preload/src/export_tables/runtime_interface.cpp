// Runtime interface (6bd5fb6c-...): cudart's back door to contexts and modules.
// Slot 2 is required: cudart gets the primary context here and never calls
// cuDevicePrimaryCtxRetain or cuCtxSetCurrent itself (measured, CUDA 13.0).
// Slots 1, 6 and 8 load a module straight from a fat binary (older cudart; CUDA 13
// uses cuLibraryLoadData instead); they fail cleanly until module loading exists.
#include "contexts.h"
#include "export_tables/export_tables.h"
#include "export_tables/unknown_slot.h"
#include "trace.h"
#include "unsupported.h"

namespace tally::client::export_tables {
namespace {

constexpr char kName[] = "runtime interface";

CUresult get_primary_context(CUcontext* pctx, CUdevice dev) {
  CUresult rc = primary_context(dev, pctx);
  trace_line("runtime interface: primary context of device %d -> %d", dev, static_cast<int>(rc));
  return rc;
}

CUresult module_from_fatbin(CUmodule*, const void*) {
  static OnceFlag logged;
  return unsupported_entry(logged, "cudart's module loader (runtime interface slot 1)");
}

CUresult module_from_fatbin_ext(CUmodule*, const void*, void*, void*, unsigned) {
  static OnceFlag logged;
  return unsupported_entry(logged, "cudart's module loader (runtime interface slot 6)");
}

CUresult module_from_fatbin_header(const void*, CUmodule*, void*, void*, unsigned) {
  static OnceFlag logged;
  return unsupported_entry(logged, "cudart's module loader (runtime interface slot 8)");
}

// Called with one integer; no observable effect is known.
CUresult slot7(size_t) { return CUDA_SUCCESS; }

}  // namespace

Table runtime_interface() {
  static const PaddedTable<kName> table(PaddedTable<kName>::kSizeHeader,
                                        {
                                            reinterpret_cast<const void*>(&module_from_fatbin),
                                            reinterpret_cast<const void*>(&get_primary_context),
                                            nullptr,
                                            nullptr,
                                            nullptr,
                                            reinterpret_cast<const void*>(&module_from_fatbin_ext),
                                            reinterpret_cast<const void*>(&slot7),
                                            reinterpret_cast<const void*>(&module_from_fatbin_header),
                                        });
  return table.slots();
}

}  // namespace tally::client::export_tables
