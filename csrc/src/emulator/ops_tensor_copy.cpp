// TMA tensor copies (cp.async.bulk.tensor, tile mode): a box of a 1-5 D tensor,
// described by a tensor map (tensor_map.h, tally's layout), between global memory
// and shared memory. Like the other bulk copies it happens when issued; a load
// then pays the box's bytes off on the mbarrier of each destination block.
//
// Shared memory holds the box densely, dimension 0 innermost, one element per
// traversal step (elementStrides: ceil(box / stride) elements per dimension).
// With a swizzle mode the 16-byte chunk index of each shared address (bits 4-6)
// is XORed with the 128-byte row index (bits 7-9), masked to the swizzle's span:
// 128B uses three bits, 64B two, 32B one; the hardware's pattern, a function of
// the address, so boxes start at a multiple of the pattern's repeat (1024, 512,
// 256 bytes) to see it from their first byte, as CUDA's programming guide asks.
// Elements of the box outside the tensor read as zero (or, with the NaN fill
// mode, a NaN) and are not written by stores.
//
// Reductions (cp.reduce.async.bulk.tensor) combine the box into the tensor element by
// element with the atomics' arithmetic, the element type being the map's.
//
// Operands: loads op[0] the shared destination, op[1] the map's generic address,
// op[2] the mbarrier (flag kMulticast: its address | the CTA mask << 32), op[3..]
// the coordinates; stores op[0] the map, op[1] the shared source, op[3..] the
// coordinates. `size` is the copy's rank.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "emulator/mbarrier.h"
#include "emulator/ops_common.h"
#include "emulator/tensor_map.h"

namespace tally::emu {
namespace {

constexpr uint32_t kMulticast = 1;

// CUtensorMapDataType -> bytes per element (0: not copied by the emulator)
uint32_t element_bytes(uint32_t type) {
  static constexpr uint32_t kBytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  return type < sizeof kBytes / sizeof kBytes[0] ? kBytes[type] : 0;
}

struct Map {
  uint32_t rank, type, elem;
  uint64_t address;
  uint64_t dim[kTensorMapMaxRank];
  uint64_t stride[kTensorMapMaxRank];  // bytes; stride[0] = the element size
  uint32_t box[kTensorMapMaxRank], step[kTensorMapMaxRank];
  uint32_t interleave, swizzle, form, fill;
};

template <class T>
T field(const uint8_t* map, const char* name, uint32_t ordinal = 0) {
  TensorMapField f = tensor_map_field(name, ordinal);
  uint64_t v = 0;
  std::memcpy(&v, map + f.offset, f.size);
  return static_cast<T>(v);
}

Map read_map(Exec& e, uint64_t address, uint32_t copy_rank, int lane) {
  const uint8_t* raw = e.generic(address, kTensorMapBytes, lane);
  Map m{};
  m.rank = field<uint32_t>(raw, "rank");
  m.type = field<uint32_t>(raw, "elemtype");
  m.elem = element_bytes(m.type);
  m.address = field<uint64_t>(raw, "global_address");
  m.interleave = field<uint32_t>(raw, "interleave_layout");
  m.swizzle = field<uint32_t>(raw, "swizzle_mode");
  m.form = field<uint32_t>(raw, "swizzle_atomicity") >> 4;
  m.fill = field<uint32_t>(raw, "fill_mode");
  if (m.rank == 0 || m.rank > kTensorMapMaxRank || m.elem == 0) {
    fault(kIllegalAddress, "cp.async.bulk.tensor with " + hex(address) + ", which holds no tensor map", lane);
  }
  if (m.rank != copy_rank) {
    fault(kLaunchFailed, "cp.async.bulk.tensor." + std::to_string(copy_rank) + "d with a tensor map of rank " +
                             std::to_string(m.rank), lane);
  }
  if (m.form != 0 || m.interleave != 0 || m.swizzle > 3) {
    fault(kIllegalInstruction, "the emulator copies tiled tensor maps without interleave and with swizzle "
                               "none/32B/64B/128B only (this map: form " + std::to_string(m.form) + ", interleave " +
                               std::to_string(m.interleave) + ", swizzle " + std::to_string(m.swizzle) + ")", lane);
  }
  m.stride[0] = m.elem;
  for (uint32_t i = 0; i < m.rank; ++i) {
    m.dim[i] = field<uint32_t>(raw, "global_dim", i);
    m.box[i] = field<uint32_t>(raw, "box_dim", i);
    m.step[i] = field<uint32_t>(raw, "element_stride", i);
    if (i + 1 < m.rank) m.stride[i + 1] = field<uint64_t>(raw, "global_stride", i);
  }
  return m;
}

uint64_t swizzled(uint64_t shared_address, uint32_t swizzle) {
  static constexpr uint64_t kMask[] = {0, 1, 3, 7};
  uint64_t mask = kMask[swizzle];
  return shared_address ^ (((shared_address >> 7) & mask) << 4);
}

// The fill for an element outside the tensor.
void fill_element(uint8_t* to, const Map& m) {
  std::memset(to, 0, m.elem);
  if (m.fill != 1) return;
  switch (m.type) {
    case 6: case 9: {                            // f16, bf16: a quiet NaN
      uint16_t nan = m.type == 6 ? 0x7e00 : 0x7fc0;
      std::memcpy(to, &nan, 2);
      break;
    }
    case 8: {
      double nan = std::numeric_limits<double>::quiet_NaN();
      std::memcpy(to, &nan, 8);
      break;
    }
    default: {
      float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(to, &nan, 4);
    }
  }
}

// Calls visit(global element address or 0 when outside, dense byte offset in the box).
template <class F>
uint64_t for_box(const Map& m, const int64_t* at, F&& visit) {
  uint32_t count[kTensorMapMaxRank];
  uint64_t total = 1;
  for (uint32_t i = 0; i < m.rank; ++i) {
    count[i] = (m.box[i] + m.step[i] - 1) / m.step[i];
    total *= count[i];
  }
  uint32_t index[kTensorMapMaxRank] = {};
  for (uint64_t n = 0; n < total; ++n) {
    uint64_t address = m.address;
    bool inside = true;
    for (uint32_t i = 0; i < m.rank; ++i) {
      int64_t c = at[i] + static_cast<int64_t>(index[i]) * m.step[i];
      inside &= c >= 0 && static_cast<uint64_t>(c) < m.dim[i];
      address += static_cast<uint64_t>(c) * m.stride[i];
    }
    visit(inside ? address : 0, n * m.elem);
    for (uint32_t i = 0; i < m.rank && ++index[i] == count[i]; ++i) index[i] = 0;
  }
  return total * m.elem;
}

void read_coordinates(Exec& e, const Instr& in, int lane, int64_t* at) {
  for (uint32_t i = 0; i < in.size; ++i) at[i] = static_cast<int32_t>(e.lanes(in.op[3 + i])[lane]);
}

EMU_HANDLER(h_tensor_load) {
  const uint64_t* dst = e.lanes(in.op[0]);
  const uint64_t* map_at = e.lanes(in.op[1]);
  const uint64_t* bar = e.lanes(in.op[2]);
  const uint32_t* cluster = e.launch->cfg.cluster;
  uint32_t blocks = cluster[0] * cluster[1] * cluster[2];
  for_lanes(m, [&](int l) {
    Map map = read_map(e, map_at[l], in.size, l);
    int64_t at[kTensorMapMaxRank];
    read_coordinates(e, in, l, at);
    uint64_t barrier = (in.flags & kMulticast) ? bar[l] & 0xffffffffu : bar[l];
    uint32_t ctas = (in.flags & kMulticast) ? static_cast<uint32_t>(bar[l] >> 32) & 0xffffu : 0;
    // Each destination: this block's address, or the same offset in each block of the mask.
    auto load_into = [&](uint64_t base, uint64_t barrier_address) {
      uint64_t bytes = for_box(map, at, [&](uint64_t from, uint64_t offset) {
        uint64_t to = base + offset;
        uint64_t placed = (to & ~kClusterOffsetMask) | swizzled(to & kClusterOffsetMask, map.swizzle);
        uint8_t* p = e.shared(placed, map.elem, l);
        if (from) std::memcpy(p, e.global(from, map.elem, l), map.elem);
        else fill_element(p, map);
      });
      mbarrier_complete_tx(e, barrier_address, static_cast<int64_t>(bytes), l);
    };
    if (!(in.flags & kMulticast)) {
      load_into(dst[l], barrier);
      return;
    }
    for (uint32_t rank = 0; rank < blocks; ++rank) {
      if (!((ctas >> rank) & 1)) continue;
      uint64_t prefix = static_cast<uint64_t>(rank + 1) << kClusterRankShift;
      load_into(prefix | (dst[l] & kClusterOffsetMask), prefix | (barrier & kClusterOffsetMask));
    }
    if (ctas >> blocks) {
      fault(kIllegalAddress, "cp.async.bulk.tensor multicast mask " + hex(ctas) + " names blocks beyond the "
                             "cluster's " + std::to_string(blocks), l);
    }
  });
}

EMU_HANDLER(h_tensor_store) {
  const uint64_t* map_at = e.lanes(in.op[0]);
  const uint64_t* src = e.lanes(in.op[1]);
  for_lanes(m, [&](int l) {
    Map map = read_map(e, map_at[l], in.size, l);
    int64_t at[kTensorMapMaxRank];
    read_coordinates(e, in, l, at);
    for_box(map, at, [&](uint64_t to, uint64_t offset) {
      if (!to) return;   // outside the tensor: not written
      const uint8_t* p = e.shared(swizzled(src[l] + offset, map.swizzle), map.elem, l);
      std::memcpy(e.global(to, map.elem, l), p, map.elem);
    });
  });
}

// CUtensorMapDataType -> the type code of the element atomics (kTypeCount: none).
uint32_t reduction_type(uint32_t type) {
  static constexpr uint32_t kCodes[] = {kTypeCount, kU16, kU32, kS32, kU64, kS64, kF16, kF32, kF64, kBF16, kF32};
  return type < sizeof kCodes / sizeof kCodes[0] ? kCodes[type] : kTypeCount;
}

// cp.reduce.async.bulk.tensor: each element of the box inside the tensor combined
// into the tensor's (an element-wise atomic, as the bulk reductions do); flags: the
// atom operation.
EMU_HANDLER(h_tensor_reduce) {
  const uint64_t* map_at = e.lanes(in.op[0]);
  const uint64_t* src = e.lanes(in.op[1]);
  const uint32_t op = (in.flags >> flag::kAtomOpShift) & 0xf;
  for_lanes(m, [&](int l) {
    Map map = read_map(e, map_at[l], in.size, l);
    const uint32_t type = reduction_type(map.type);
    if (type == kTypeCount) {
      fault(kIllegalInstruction, "cp.reduce.async.bulk.tensor on a tensor map of element type " +
                                     std::to_string(map.type) + ", which has no reduction", l);
    }
    int64_t at[kTensorMapMaxRank];
    read_coordinates(e, in, l, at);
    for_box(map, at, [&](uint64_t to, uint64_t offset) {
      if (!to) return;   // outside the tensor: not touched
      const uint8_t* p = e.shared(swizzled(src[l] + offset, map.swizzle), map.elem, l);
      uint64_t v = 0;
      std::memcpy(&v, p, map.elem);
      reduce_in_memory(e.global(to, map.elem, l), type, op, v);
    });
  });
}

const HandlerRegistrar registrar{
    EMU_ENTRY("cp.async.bulk.tensor.shared.global", h_tensor_load),
    EMU_ENTRY("cp.async.bulk.tensor.global.shared", h_tensor_store),
    EMU_ENTRY("cp.reduce.async.bulk.tensor.global.shared", h_tensor_reduce),
};

}  // namespace
}  // namespace tally::emu
