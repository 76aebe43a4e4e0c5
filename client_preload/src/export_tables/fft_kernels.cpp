// cuFFT's table (6e163fbe-b958-444d-835c-e182aff1991e): cuFFT 12 fetches it at
// cufftCreate, after the tools context table, and without it fails every plan with
// CUFFT_INTERNAL_ERROR (CuPy's cuda_tests/test_cufft, 2026-12-05). Read from
// libcufft.so.12's code (cuFFT 12.0.0.61): it only checks that the table's size is
// more than 0x37 bytes and calls slot 7 (byte offset 0x38), from one helper that
// looks up a kernel of a loaded module when it has no name for it, with a callback
// that stores the kernel it is handed; it wants 1 back. What slot 7's arguments mean
// was not worked out, so it is a logging slot like the others: on the emulator
// cuFFT then gets as far as loading its kernels (the sm_120 cubin it picks itself,
// which the emulator cannot run: CUDA_ERROR_NO_BINARY_FOR_GPU, said in the job's
// log) and calls slot 7 after that failed (logged). On a GPU: not measured.
#include "export_tables/export_tables.h"
#include "export_tables/unknown_slot.h"

namespace tally::client::export_tables {
namespace {

constexpr char kName[] = "cuFFT kernels";

}  // namespace

Table fft_kernels() {
  static const PaddedTable<kName> table(PaddedTable<kName>::kSizeHeader, {});
  return table.slots();
}

}  // namespace tally::client::export_tables
