// TMA tensor copies (cp.async.bulk.tensor): a box of a 1-5 D tensor, or an im2col
// column of one, described by a tensor map (tensor_map.h, tally's layout), between
// global memory and shared memory. Like the other bulk copies it happens when issued;
// a load then pays the box's bytes off on the mbarrier of each destination block.
//
// Tile mode: shared memory holds the box densely, dimension 0 innermost, one element
// per traversal step (elementStrides: ceil(box / stride) elements per dimension; the
// stride of dimension 0 is ignored unless the map is interleaved, as the driver
// documents). An interleaved map (NC/8HWC8, NC/16HWC16: dimension 0 is the 16- or
// 32-byte channel chunk) is copied the same way, whole chunks only.
//
// Im2col mode (rank 3-5, dimensions C, W, H, D, N innermost first): the map's corners
// bound each spatial dimension to [lower, size + upper); from the instruction's
// spatial coordinates the copy walks that box W first, then H, then D, then on into
// the next image, stepping by the spatial elementStrides, for pixelsPerColumn
// pixels; each pixel read is the walk's position plus the instruction's im2col
// offsets, and contributes channelsPerPixel channels from coordinate 0 on. Shared
// memory holds pixel after pixel, each one's channels dense. Stores and reductions
// with .im2col_no_offs walk the same way without offsets.
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
// coordinates. `size` is the copy's rank. With flag kIm2col the coordinates come two
// to a slot (32 bits each, lowest first) and the slot after them holds the im2col
// offsets, 16 bits each (a rank-5 copy would otherwise need 3 + 5 + 3 operands).
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "emulator/mbarrier.h"
#include "emulator/ops_common.h"
#include "emulator/tensor_map.h"

namespace tally::emu {
namespace {

constexpr uint32_t kMulticast = 1, kIm2col = 2;
constexpr uint32_t kMaxSpatial = kTensorMapMaxRank - 2;

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
  // im2col maps: box[0] channels per pixel, box[1] pixels per column, and each spatial
  // dimension's corners
  int32_t lower[kMaxSpatial], upper[kMaxSpatial];
};

template <class T>
T field(const uint8_t* map, const char* name, uint32_t ordinal = 0) {
  TensorMapField f = tensor_map_field(name, ordinal);
  uint64_t v = 0;
  std::memcpy(&v, map + f.offset, f.size);
  return static_cast<T>(v);
}

Map read_map(Exec& e, uint64_t address, uint32_t copy_rank, uint32_t copy_kind, int lane) {
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
  const bool im2col_copy = copy_kind == kIm2col;
  if (m.form == 2) {
    fault(kIllegalInstruction, "an im2col-wide tensor map (cuTensorMapEncodeIm2colWide, the im2col::w modes of "
                               "compute capability 10.0) is not emulated", lane);
  }
  if ((m.form == 1) != im2col_copy) {
    fault(kIllegalInstruction, std::string(im2col_copy ? "an im2col" : "a tile-mode") + " cp.async.bulk.tensor with " +
                                   (m.form == 1 ? "an im2col" : "a tiled") + " tensor map", lane);
  }
  if (m.swizzle > 3 || (m.interleave != 0 && (im2col_copy || m.interleave > 2))) {
    fault(kIllegalInstruction, "the emulator copies swizzle none/32B/64B/128B (not the 128B atom forms of compute "
                               "capability 10.0), and interleaved tensor maps in tile mode only (this map: swizzle " +
                                   std::to_string(m.swizzle) + ", interleave " + std::to_string(m.interleave) + ")",
          lane);
  }
  m.stride[0] = m.elem;
  for (uint32_t i = 0; i < m.rank; ++i) {
    m.dim[i] = field<uint32_t>(raw, "global_dim", i);
    m.box[i] = field<uint32_t>(raw, "box_dim", i);
    m.step[i] = field<uint32_t>(raw, "element_stride", i);
    if (i + 1 < m.rank) m.stride[i + 1] = field<uint64_t>(raw, "global_stride", i);
  }
  if (m.interleave == 0) m.step[0] = 1;   // "TMA doesn't support the stride for dimension zero"
  if (m.interleave != 0) {
    uint32_t chunk = m.interleave == 1 ? 16 : 32;
    if (m.box[0] * m.elem != chunk || m.step[0] != 1) {
      fault(kIllegalInstruction, "an interleaved tensor map whose box takes part of a " + std::to_string(chunk) +
                                     "-byte channel chunk (boxDim[0] = " + std::to_string(m.box[0]) +
                                     ", elementStrides[0] = " + std::to_string(m.step[0]) +
                                     "): the emulator copies whole chunks", lane);
    }
  }
  if (m.form == 1) {
    for (uint32_t s = 0; s + 2 < m.rank; ++s) {
      uint32_t corners = m.box[2 + s];
      m.lower[s] = static_cast<int16_t>(corners & 0xffffu);
      m.upper[s] = static_cast<int16_t>(corners >> 16);
    }
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

// Calls visit(global element address or 0 when outside, dense byte offset) for each
// element of an im2col column (the walk the header describes).
template <class F>
uint64_t for_column(const Map& m, const int64_t* at, const int32_t* offsets, F&& visit) {
  const uint32_t spatial = m.rank - 2, batch_dim = m.rank - 1;
  const uint32_t channels = m.box[0], pixels = m.box[1];
  int64_t position[kMaxSpatial];
  for (uint32_t s = 0; s < spatial; ++s) position[s] = at[1 + s];
  int64_t image = at[batch_dim];
  uint64_t n = 0;
  for (uint32_t k = 0; k < pixels; ++k) {
    bool inside = image >= 0 && static_cast<uint64_t>(image) < m.dim[batch_dim];
    uint64_t pixel = m.address + static_cast<uint64_t>(image) * m.stride[batch_dim];
    for (uint32_t s = 0; s < spatial; ++s) {
      int64_t c = position[s] + offsets[s];
      inside &= c >= 0 && static_cast<uint64_t>(c) < m.dim[1 + s];
      pixel += static_cast<uint64_t>(c) * m.stride[1 + s];
    }
    for (uint32_t j = 0; j < channels; ++j, ++n) {
      int64_t c = at[0] + j;
      bool here = inside && c >= 0 && static_cast<uint64_t>(c) < m.dim[0];
      visit(here ? pixel + static_cast<uint64_t>(c) * m.elem : 0, n * m.elem);
    }
    // The next pixel: along W; past the box's upper bound back to its lower one and on
    // along H, then D, then into the next image.
    for (uint32_t s = 0;; ++s) {
      if (s == spatial) {
        ++image;
        break;
      }
      position[s] += m.step[1 + s];
      if (position[s] < static_cast<int64_t>(m.dim[1 + s]) + m.upper[s]) break;
      position[s] = m.lower[s];
    }
  }
  return n * m.elem;
}

// A copy's coordinates (and im2col offsets, zero without them).
struct Coordinates {
  int64_t at[kTensorMapMaxRank] = {};
  int32_t offsets[kMaxSpatial] = {};
};

Coordinates read_coordinates(Exec& e, const Instr& in, int lane) {
  Coordinates c;
  if (!(in.flags & kIm2col)) {
    for (uint32_t i = 0; i < in.size; ++i) c.at[i] = static_cast<int32_t>(e.lanes(in.op[3 + i])[lane]);
    return c;
  }
  for (uint32_t i = 0; i < in.size; ++i) {
    c.at[i] = static_cast<int32_t>(e.lanes(in.op[3 + i / 2])[lane] >> (32 * (i % 2)));
  }
  uint64_t packed = e.lanes(in.op[3 + (in.size + 1) / 2])[lane];
  for (uint32_t s = 0; s + 2 < in.size; ++s) c.offsets[s] = static_cast<int16_t>(packed >> (16 * s));
  return c;
}

// Visits the copy's elements: a box in tile mode, a column in im2col mode.
template <class F>
uint64_t for_copy(const Map& m, const Coordinates& c, F&& visit) {
  return m.form == 1 ? for_column(m, c.at, c.offsets, visit) : for_box(m, c.at, visit);
}

EMU_HANDLER(h_tensor_load) {
  const uint64_t* dst = e.lanes(in.op[0]);
  const uint64_t* map_at = e.lanes(in.op[1]);
  const uint64_t* bar = e.lanes(in.op[2]);
  const uint32_t* cluster = e.launch->cfg.cluster;
  uint32_t blocks = cluster[0] * cluster[1] * cluster[2];
  for_lanes(m, [&](int l) {
    Map map = read_map(e, map_at[l], in.size, in.flags & kIm2col, l);
    Coordinates at = read_coordinates(e, in, l);
    uint64_t barrier = (in.flags & kMulticast) ? bar[l] & 0xffffffffu : bar[l];
    uint32_t ctas = (in.flags & kMulticast) ? static_cast<uint32_t>(bar[l] >> 32) & 0xffffu : 0;
    // Each destination: this block's address, or the same offset in each block of the mask.
    auto load_into = [&](uint64_t base, uint64_t barrier_address) {
      uint64_t bytes = for_copy(map, at, [&](uint64_t from, uint64_t offset) {
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
    Map map = read_map(e, map_at[l], in.size, in.flags & kIm2col, l);
    Coordinates at = read_coordinates(e, in, l);
    for_copy(map, at, [&](uint64_t to, uint64_t offset) {
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
    Map map = read_map(e, map_at[l], in.size, in.flags & kIm2col, l);
    const uint32_t type = reduction_type(map.type);
    if (type == kTypeCount) {
      fault(kIllegalInstruction, "cp.reduce.async.bulk.tensor on a tensor map of element type " +
                                     std::to_string(map.type) + ", which has no reduction", l);
    }
    Coordinates at = read_coordinates(e, in, l);
    for_copy(map, at, [&](uint64_t to, uint64_t offset) {
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
