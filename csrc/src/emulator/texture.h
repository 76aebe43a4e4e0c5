// The emulator's texture and surface objects: the 128-byte descriptor a
// CUtexObject / CUsurfObject names. On a GPU the handle is the driver's; on the
// emulator it is the device address of this descriptor, which the server's backend
// writes at cuTexObjectCreate / cuSurfObjectCreate (tally/backends/texture_objects.py
// packs it by asking `texture_field` for each offset) and the tex, tld4, suld and sust
// handlers (ops_texture.cpp) read. This header is the one place that defines it.
//
//   offset  field            type
//   0x00    magic            u32   kTextureMagic: a handle that names no descriptor faults
//   0x04    kind             u32   1 texture, 2 surface
//   0x08    base             u64   device address of texel (0, 0, 0) of layer 0
//   0x10    pitch            u64   bytes from one row to the next
//   0x18    slice_pitch      u64   bytes from one slice (3-D) or layer to the next
//   0x20    width            u32   texels per row (a linear resource: texels in all)
//   0x24    height           u32   rows (1 for 1-D)
//   0x28    depth            u32   slices (1 unless 3-D)
//   0x2c    layers           u32   layers (1 unless layered; a cubemap: 6 per layer)
//   0x30    format           u32   CUarray_format
//   0x34    channels         u32   1, 2 or 4
//   0x38    texel_bytes      u32
//   0x3c    shape            u32   a TextureShape
//   0x40    flags            u32   CU_TRSF_* (read as integer, normalized coordinates)
//   0x44    address_mode[3]  u32   CUaddress_mode per dimension
//   0x50    filter_mode      u32   CUfilter_mode
//   0x58    border[4]        f32   the border color
#pragma once

#include <cstdint>
#include <string>

namespace tally::emu {

constexpr uint32_t kTextureBytes = 128;
constexpr uint32_t kTextureMagic = 0x3158'4f54;   // "TOX1" little-endian
constexpr uint32_t kTextureKind = 1, kSurfaceKind = 2;

// What the resource is, as the sampling instructions see it.
enum TextureShape : uint32_t {
  kShapeLinear = 0,     // CU_RESOURCE_TYPE_LINEAR: texels by integer index, zero outside
  kShape1d = 1,
  kShape2d = 2,         // a 2-D array or CU_RESOURCE_TYPE_PITCH2D
  kShape3d = 3,
  kShapeLayered1d = 4,
  kShapeLayered2d = 5,
  kShapeCube = 6,
  kShapeLayeredCube = 7,
};

struct TextureField {
  uint32_t offset = 0;
  uint32_t size = 0;      // 0: no such field
};

inline TextureField texture_field(const std::string& name, uint32_t ordinal = 0) {
  if (name == "address_mode") return ordinal < 3 ? TextureField{0x44 + 4 * ordinal, 4} : TextureField{};
  if (name == "border") return ordinal < 4 ? TextureField{0x58 + 4 * ordinal, 4} : TextureField{};
  if (ordinal != 0) return {};
  struct Scalar {
    const char* name;
    uint32_t offset, size;
  };
  static constexpr Scalar kScalars[] = {
      {"magic", 0x00, 4},   {"kind", 0x04, 4},        {"base", 0x08, 8},     {"pitch", 0x10, 8},
      {"slice_pitch", 0x18, 8}, {"width", 0x20, 4},   {"height", 0x24, 4},   {"depth", 0x28, 4},
      {"layers", 0x2c, 4},  {"format", 0x30, 4},      {"channels", 0x34, 4}, {"texel_bytes", 0x38, 4},
      {"shape", 0x3c, 4},   {"flags", 0x40, 4},       {"filter_mode", 0x50, 4},
  };
  for (const Scalar& s : kScalars) {
    if (name == s.name) return {s.offset, s.size};
  }
  return {};
}

}  // namespace tally::emu
