// Runtime interface (6bd5fb6c-...): cudart's back door to contexts and modules.
// Slot 2 hands out a device's primary context (cudart 13 also retains and sets it
// through cuDevicePrimaryCtxRetain and cuCtxSetCurrent, as traced with 13.0 and 13.2).
// Slot 12 is new in cudart 13.2 (see slot12).
// Slots 1, 6 and 8 load a module straight from a fat binary (older cudart; CUDA 13
// uses cuLibraryLoadData instead); they fail cleanly until module loading exists.
#include "contexts/contexts.h"
#include "export_tables/export_tables.h"
#include "export_tables/unknown_slot.h"
#include "logging/trace.h"
#include "entry_points/unsupported.h"

namespace tally::client::export_tables {
namespace {

constexpr char kName[] = "runtime interface";

CUresult get_primary_context(CUcontext* pctx, CUdevice dev) {
  CUresult rc = runtime_primary_context(dev, pctx);
  trace_line("runtime interface: primary context of device %d -> %d", dev, static_cast<int>(rc));
  return rc;
}

// cudart loads its fatbins through the public module API under tally (it falls back
// to it when these answer NOT_SUPPORTED), where the server sees every module.
constexpr char kLoaderReason[] = "cudart then loads the module through cuModuleLoadData, which tally serves";

CUresult module_from_fatbin(CUmodule*, const void*) {
  static OnceFlag logged;
  return unsupported_entry(logged, "cudart's module loader (runtime interface slot 1)", kLoaderReason);
}

CUresult module_from_fatbin_ext(CUmodule*, const void*, void*, void*, unsigned) {
  static OnceFlag logged;
  return unsupported_entry(logged, "cudart's module loader (runtime interface slot 6)", kLoaderReason);
}

CUresult module_from_fatbin_header(const void*, CUmodule*, void*, void*, unsigned) {
  static OnceFlag logged;
  return unsupported_entry(logged, "cudart's module loader (runtime interface slot 8)", kLoaderReason);
}

// Called with one integer; no observable effect is known.
CUresult slot7(size_t) { return CUDA_SUCCESS; }

// cudart 13.2 calls it while it initializes (inside cudaGetDeviceCount's first
// call) unless the environment variable CUDA_8b3537d1 is "dc6ffd77", with no
// arguments we could identify; a nonzero result fails the initialization and so
// every CUDA call of the job (measured with PyTorch 2.15's cudart). cudart 13.0
// never calls it. No observable effect is known, so it succeeds.
CUresult slot12() { return CUDA_SUCCESS; }

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
                                            nullptr,
                                            nullptr,
                                            nullptr,
                                            reinterpret_cast<const void*>(&slot12),
                                        });
  return table.slots();
}

}  // namespace tally::client::export_tables
