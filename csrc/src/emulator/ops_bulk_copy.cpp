// Bulk asynchronous copies (sm_90's cp.async.bulk, without a tensor map):
// contiguous bytes between global and shared memory, or from a block's shared
// memory into another block's of its cluster, and their element-wise reductions
// (cp.reduce.async.bulk). The copy happens at once, when the issuing thread
// runs the instruction; what is asynchronous on a GPU is then only the
// completion signal: copies into shared memory pay off their bytes on the
// destination's mbarrier (complete_tx), copies out of shared memory belong to a
// bulk group whose commit/wait have nothing left to wait for.
//
// Operands (addresses are whole: the lowering adds the offsets):
//   op[0] destination, op[1] source, op[2] size in bytes, op[3] the mbarrier
//   (copies into shared memory), op[4] the multicast CTA mask (kNoSlot: none).
// Sizes and addresses are multiples of 16 bytes, as the PTX ISA requires.
#include <cstring>
#include <string>

#include "emulator/mbarrier.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

uint32_t cluster_size(const Exec& e) {
  const uint32_t* c = e.launch->cfg.cluster;
  return c[0] * c[1] * c[2];
}

void check_granule(uint64_t value, const char* what, int lane) {
  if (value % 16 != 0) {
    fault(kMisalignedAddress, std::string("cp.async.bulk ") + what + " " + hex(value) +
                                  " is not a multiple of 16 bytes", lane);
  }
}

// The .shared::cluster address of `address` (a .shared::cta or .shared::cluster
// address) in the block of cluster rank `rank`.
uint64_t in_rank(uint64_t address, uint32_t rank) {
  return (static_cast<uint64_t>(rank + 1) << kClusterRankShift) | (address & kClusterOffsetMask);
}

// Global or another block's shared memory -> shared memory, then complete_tx
// on the destination's barrier. kFromShared: the source is .shared::cta.
template <bool kFromShared> EMU_HANDLER(h_bulk_to_shared) {
  const uint64_t* dst = e.lanes(in.op[0]);
  const uint64_t* src = e.lanes(in.op[1]);
  const uint64_t* size = e.lanes(in.op[2]);
  const uint64_t* bar = e.lanes(in.op[3]);
  const uint64_t* mask = in.op[4] == kNoSlot ? nullptr : e.lanes(in.op[4]);
  for_lanes(m, [&](int l) {
    uint32_t n = static_cast<uint32_t>(size[l]);
    check_granule(n, "size", l);
    check_granule(dst[l], "destination", l);
    check_granule(src[l], "source", l);
    if (n == 0) return;
    const uint8_t* from = kFromShared ? e.shared(src[l], n, l) : e.global(src[l], n, l);
    if (!mask) {
      std::memmove(e.shared(dst[l], n, l), from, n);
      mbarrier_complete_tx(e, bar[l], n, l);
      return;
    }
    // Multicast: the same offsets in every block of the mask.
    uint32_t ctas = static_cast<uint32_t>(mask[l]) & 0xffffu;
    for (uint32_t rank = 0; rank < cluster_size(e) && ctas; ++rank, ctas >>= 1) {
      if (!(ctas & 1)) continue;
      std::memmove(e.shared(in_rank(dst[l], rank), n, l), from, n);
      mbarrier_complete_tx(e, in_rank(bar[l], rank), n, l);
    }
    if (ctas) {
      fault(kIllegalAddress, "cp.async.bulk multicast mask " + hex(mask[l]) + " names blocks beyond the cluster's " +
                                 std::to_string(cluster_size(e)), l);
    }
  });
}

// Shared memory -> global memory (bulk group completion).
EMU_HANDLER(h_bulk_to_global) {
  const uint64_t* dst = e.lanes(in.op[0]);
  const uint64_t* src = e.lanes(in.op[1]);
  const uint64_t* size = e.lanes(in.op[2]);
  for_lanes(m, [&](int l) {
    uint32_t n = static_cast<uint32_t>(size[l]);
    check_granule(n, "size", l);
    check_granule(dst[l], "destination", l);
    check_granule(src[l], "source", l);
    if (n) std::memmove(e.global(dst[l], n, l), e.shared(src[l], n, l), n);
  });
}

// cp.reduce.async.bulk: dst[i] = dst[i] op src[i] for each element (size = the
// instruction's element size; flags: atom's operation and type codes).
// kToShared: into another block's shared memory, completing on its barrier.
template <bool kToShared> EMU_HANDLER(h_bulk_reduce) {
  const uint64_t* dst = e.lanes(in.op[0]);
  const uint64_t* src = e.lanes(in.op[1]);
  const uint64_t* size = e.lanes(in.op[2]);
  const uint64_t* bar = kToShared ? e.lanes(in.op[3]) : nullptr;
  uint32_t op = (in.flags >> flag::kAtomOpShift) & 0xf;
  uint32_t type = (in.flags >> flag::kSrcTypeShift) & flag::kTypeMask;
  for_lanes(m, [&](int l) {
    uint32_t n = static_cast<uint32_t>(size[l]);
    check_granule(n, "size", l);
    check_granule(dst[l], "destination", l);
    check_granule(src[l], "source", l);
    if (n) {
      uint8_t* to = kToShared ? e.shared(dst[l], n, l) : e.global(dst[l], n, l);
      const uint8_t* from = e.shared(src[l], n, l);
      for (uint32_t i = 0; i < n; i += in.size) {
        uint64_t v = 0;
        std::memcpy(&v, from + i, in.size);
        reduce_in_memory(to + i, type, op, v);
      }
    }
    if (kToShared) mbarrier_complete_tx(e, bar[l], n, l);
  });
}

const HandlerRegistrar registrar{
    EMU_ENTRY("cp.async.bulk.shared.global", h_bulk_to_shared<false>),
    EMU_ENTRY("cp.async.bulk.shared.shared", h_bulk_to_shared<true>),
    EMU_ENTRY("cp.async.bulk.global.shared", h_bulk_to_global),
    EMU_ENTRY("cp.reduce.async.bulk.global.shared", h_bulk_reduce<false>),
    EMU_ENTRY("cp.reduce.async.bulk.shared.shared", h_bulk_reduce<true>),
};

}  // namespace
}  // namespace tally::emu
