// The table CUPTI 13.1 and newer ask for when their library starts
// (7cb63f9b-9ca4-8e42-a484-beb66e6aed7f; e.g. the nvidia-cuda-cupti 13.5 wheel JAX
// loads). Not found, CUPTI fails everything with CUPTI_ERROR_UNKNOWN (999), and
// JAX's CUDA plugin, which checks cuptiGetVersion at start, gives up on CUDA. With
// it, CUPTI loads and answers its version. Tally does not reproduce the driver's
// tool interfaces behind NVIDIA's callback and activity APIs: every slot of this
// table logs once and answers CUDA_ERROR_NOT_SUPPORTED, and the further tables
// those APIs ask for are not found (logged by cuGetExportTable), so NVIDIA's CUPTI
// gives an error, never made-up data. Jobs linked against libcupti call tally's
// own CUPTI instead (src/cupti/, docs/cupti.md); this table serves programs that
// reach NVIDIA's through dlsym on its handle (XLA).
#include "export_tables/export_tables.h"
#include "export_tables/unknown_slot.h"

namespace tally::client::export_tables {
namespace {

constexpr char kName[] = "CUPTI";

}  // namespace

Table tools_cupti() {
  static const PaddedTable<kName, CUDA_ERROR_NOT_SUPPORTED> table(
      PaddedTable<kName, CUDA_ERROR_NOT_SUPPORTED>::kSizeHeader, {});
  return table.slots();
}

}  // namespace tally::client::export_tables
