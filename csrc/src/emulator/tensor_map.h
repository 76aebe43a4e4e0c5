// The emulator's tensor map: the 128-byte object (CUtensorMap) that TMA copies
// read and `tensormap.replace` edits. On a GPU its layout is the driver's secret;
// this is the emulator's own, the one place that defines it (the lowering of
// tensormap.replace asks it for field offsets; TMA copies will read it).
//
//   offset  field               type
//   0x00    rank                u32
//   0x04    elemtype            u32   (a CUtensorMapDataType)
//   0x08    global_address      u64
//   0x10    global_stride[5]    u64   (bytes)
//   0x38    global_dim[5]       u32
//   0x4c    box_dim[5]          u32
//   0x60    element_stride[5]   u32
//   0x74    interleave_layout   u32
//   0x78    swizzle_mode        u32
//   0x7c    swizzle_atomicity   u8
//   0x7d    fill_mode           u8
//   0x7e    (reserved)          u16
//
// Every field holds the value the PTX instruction (or the encoding call) gave it,
// as the PTX ISA defines that operand.
#pragma once

#include <cstdint>
#include <string>

namespace tally::emu {

constexpr uint32_t kTensorMapBytes = 128;
constexpr uint32_t kTensorMapMaxRank = 5;

struct TensorMapField {
  uint32_t offset = 0;
  uint32_t size = 0;      // 0: no such field (or the ordinal is out of range)
};

inline TensorMapField tensor_map_field(const std::string& name, uint32_t ordinal = 0) {
  struct Array {
    const char* name;
    uint32_t offset, size;
  };
  static constexpr Array kArrays[] = {
      {"global_stride", 0x10, 8}, {"global_dim", 0x38, 4}, {"box_dim", 0x4c, 4}, {"element_stride", 0x60, 4}};
  for (const Array& a : kArrays) {
    if (name == a.name) return ordinal < kTensorMapMaxRank ? TensorMapField{a.offset + ordinal * a.size, a.size} : TensorMapField{};
  }
  if (ordinal != 0) return {};
  if (name == "rank") return {0x00, 4};
  if (name == "elemtype") return {0x04, 4};
  if (name == "global_address") return {0x08, 8};
  if (name == "interleave_layout") return {0x74, 4};
  if (name == "swizzle_mode") return {0x78, 4};
  if (name == "swizzle_atomicity") return {0x7c, 1};
  if (name == "fill_mode") return {0x7d, 1};
  return {};
}

}  // namespace tally::emu
