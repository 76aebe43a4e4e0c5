// What asynchronous copies (ops_bulk_copy.cpp, ops_tensor_copy.cpp) do to an
// arrive-wait barrier when their bytes have landed (ops_mbarrier.cpp keeps the
// barrier's layout to itself).
#pragma once

#include <cstdint>

#include "emulator/exec.h"

namespace tally::emu {

// complete_tx of `bytes` on the barrier at `shared_address` (a .shared::cta or
// .shared::cluster address): may complete its current phase.
void mbarrier_complete_tx(Exec& e, uint64_t shared_address, int64_t bytes, int lane);

}  // namespace tally::emu
