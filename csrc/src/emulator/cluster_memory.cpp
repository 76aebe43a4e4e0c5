// Distributed shared memory of thread-block clusters: .shared::cluster accesses
// to another block's shared memory, `mapa` (a block's shared address -> the same
// offset in the shared memory of the block of another rank) and `getctarank`.
// The address encoding is in emu_types.h (kClusterRankShift). The blocks of a
// cluster run on one worker (scheduler.cpp), so these accesses need no locks.
#include "emulator/ops_common.h"

namespace tally::emu {

namespace {

uint32_t cluster_blocks(const Exec& e) {
  const uint32_t* c = e.launch->cfg.cluster;
  return c[0] * c[1] * c[2];
}

// The .shared::cluster address of `offset` in the shared memory of block `rank`.
uint64_t cluster_address(const Exec& e, uint64_t offset, uint64_t rank, int lane) {
  if (rank >= cluster_blocks(e)) {
    fault(kIllegalAddress, "mapa to block rank " + std::to_string(rank) + " of a cluster of " +
                               std::to_string(cluster_blocks(e)) + " blocks", lane);
  }
  return ((rank + 1) << kClusterRankShift) | (offset & kClusterOffsetMask);
}

// mapa.shared::cluster d, a, rank (a: a .shared::cta or .shared::cluster address)
EMU_HANDLER(h_mapa_shared) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* rank = e.lanes(in.op[2]);
  for_lanes(m, [&](int l) { d[l] = cluster_address(e, a[l], static_cast<uint32_t>(rank[l]), l); });
}

// mapa d, a, rank on generic addresses: a must point into shared memory.
EMU_HANDLER(h_mapa_generic) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  const uint64_t* rank = e.lanes(in.op[2]);
  for_lanes(m, [&](int l) {
    uint64_t offset = a[l] - kSharedWindow;
    if (offset >= kWindowSize) {
      fault(kIllegalAddress, "mapa of " + hex(a[l]) + ", which is no shared-memory address", l);
    }
    d[l] = kSharedWindow + cluster_address(e, offset, static_cast<uint32_t>(rank[l]), l);
  });
}

// getctarank{.shared::cluster} d, a: the rank of the block whose shared memory `a` is in.
template <bool kGeneric> EMU_HANDLER(h_getctarank) {
  uint64_t* d = e.lanes(in.op[0]);
  const uint64_t* a = e.lanes(in.op[1]);
  for_lanes(m, [&](int l) {
    uint64_t address = kGeneric ? a[l] - kSharedWindow : a[l];
    if (address >= kWindowSize) fault(kIllegalAddress, "getctarank of " + hex(a[l]) + ", which is no shared-memory address", l);
    uint64_t rank_plus_one = address >> kClusterRankShift;
    d[l] = rank_plus_one ? rank_plus_one - 1 : e.launch->block.cluster_rank;
  });
}

const HandlerRegistrar registrar{
    EMU_ENTRY("mapa.shared", h_mapa_shared), EMU_ENTRY("mapa.generic", h_mapa_generic),
    EMU_ENTRY("getctarank.shared", h_getctarank<false>), EMU_ENTRY("getctarank.generic", h_getctarank<true>),
};

}  // namespace

uint8_t* Exec::cluster_shared(uint64_t addr, uint32_t n, int lane) {
  uint64_t rank = (addr >> kClusterRankShift) - 1;
  uint64_t offset = addr & kClusterOffsetMask;
  Launch& L = *launch;
  uint8_t* data;
  size_t size;
  if (rank == L.block.cluster_rank) {
    data = L.block.shared.data();
    size = L.block.shared.size();
  } else if (rank < L.cluster_shared.size()) {
    data = L.cluster_shared[rank].data;
    size = L.cluster_shared[rank].size;
  } else {
    fault(kIllegalAddress, "illegal address " + hex(addr) + " in the shared::cluster space (block rank " +
                               std::to_string(rank) + "; the cluster has " + std::to_string(cluster_blocks(*this)) +
                               " blocks)", lane);
  }
  if (offset + n > size) {
    fault(kIllegalAddress, "illegal address " + hex(addr) + " in the shared::cluster space (" + std::to_string(n) +
                               "-byte access at offset " + std::to_string(offset) + " of block rank " +
                               std::to_string(rank) + ", whose shared memory holds " + std::to_string(size) + " bytes)",
          lane);
  }
  return data + offset;
}

}  // namespace tally::emu
