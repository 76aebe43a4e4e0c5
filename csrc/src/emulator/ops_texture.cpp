// Texture fetches (tex, tld4) and surface loads and stores (suld.b, sust.b) through
// tally's texture descriptors (texture.h): the handle a kernel holds is the device
// address of one. There are no texture units, so each fetch is done here the way
// CUDA's programming guide defines texture fetching:
//
// - Coordinates: normalized ones are scaled by the dimension's size first. Point
//   filtering reads texel floor(u); linear filtering reads the 2 (1-D), 4 (2-D) or
//   8 (3-D) texels around u - 0.5 and blends them with weights kept, as the hardware
//   does, in fixed point with 8 fractional bits.
// - Each texel index goes through the dimension's address mode: wrap and mirror
//   (normalized coordinates only; without them CUDA documents clamp as the only mode)
//   repeat the texture or its mirror image, clamp holds the edge texel, border reads
//   the border color. A linear resource is read by integer index, zero outside.
// - Layers (a1d, a2d) take an integer layer index, clamped to the layers there are.
//   A cubemap fetch picks the face of the direction's major axis and its (s, t) by
//   the table of the programming guide's cubemap section; faces are layers 0-5.
// - What a texel reads as: 32-bit integer formats and 8/16-bit integer formats with
//   CU_TRSF_READ_AS_INTEGER give integers (sign- or zero-extended); the other 8/16-bit
//   formats give floats normalized to [0, 1] (unsigned) or [-1, 1] (signed); half and
//   float formats give floats. Channels a texture lacks read as 0, alpha as 1.
// - tld4 (tex2Dgather) gives component `imm2` of the four texels bilinear filtering
//   would blend, in the order (i0, j1), (i1, j1), (i1, j0), (i0, j0).
//
// Surfaces (suld.b, sust.b) address x in bytes, y and z in rows and slices, and read
// or write `width` elements of `size` bytes. Out of bounds: .trap faults with
// CUDA_ERROR_ILLEGAL_ADDRESS, .clamp moves the access to the nearest place inside,
// .zero reads zeros and drops the store.
//
// Operands: tex and tld4 op[0..3] the four destinations, op[4] the handle,
// op[5..7] the coordinates (layered: the layer first); imm the instruction's
// geometry (a TextureShape), flags bit 0 integer coordinates, tld4's imm2 the
// component. suld op[0..3] the destinations, sust op[0..3] the values, both op[4]
// the handle and op[5..7] the coordinates; imm the geometry, flags the
// out-of-bounds mode (0 trap, 1 clamp, 2 zero).
#include <cmath>
#include <cstring>
#include <string>

#include "emulator/float_formats.h"
#include "emulator/ops_common.h"
#include "emulator/texture.h"

namespace tally::emu {
namespace {

constexpr uint32_t kReadAsInteger = 0x01, kNormalizedCoordinates = 0x02;
constexpr uint32_t kWrap = 0, kClamp = 1, kMirror = 2, kBorder = 3;
constexpr uint32_t kFilterLinear = 1;
constexpr uint32_t kIntegerCoordinates = 1;
constexpr uint32_t kTrap = 0, kClampOutside = 1, kZeroOutside = 2;

struct Texture {
  uint32_t kind, shape, format, channels, texel_bytes, flags, filter;
  uint64_t base, pitch, slice_pitch;
  uint32_t size[3];       // width, height, depth
  uint32_t layers;
  uint32_t mode[3];
  float border[4];
};

// Each field's offset, asked of texture.h once (the names are compared only here).
struct Offsets {
  uint32_t magic, kind, shape, format, channels, texel_bytes, flags, filter, base, pitch, slice_pitch, layers;
  uint32_t size[3], mode[3], border[4];
  Offsets() {
    auto at = [](const char* name, uint32_t ordinal = 0) { return texture_field(name, ordinal).offset; };
    magic = at("magic"), kind = at("kind"), shape = at("shape"), format = at("format");
    channels = at("channels"), texel_bytes = at("texel_bytes"), flags = at("flags"), filter = at("filter_mode");
    base = at("base"), pitch = at("pitch"), slice_pitch = at("slice_pitch"), layers = at("layers");
    size[0] = at("width"), size[1] = at("height"), size[2] = at("depth");
    for (uint32_t i = 0; i < 3; ++i) mode[i] = at("address_mode", i);
    for (uint32_t i = 0; i < 4; ++i) border[i] = at("border", i);
  }
};

const Offsets& offsets() {
  static const Offsets kOffsets;
  return kOffsets;
}

template <class T>
T field(const uint8_t* raw, uint32_t offset) {
  T v{};
  std::memcpy(&v, raw + offset, sizeof v);
  return v;
}

const char* shape_name(uint32_t shape) {
  static const char* kNames[] = {"linear", "1d", "2d", "3d", "a1d", "a2d", "cube", "acube"};
  return shape < 8 ? kNames[shape] : "unknown";
}

// Whether an instruction of geometry `geometry` may read a resource of `shape`.
bool geometry_fits(uint32_t geometry, uint32_t shape) {
  if (geometry == kShape1d) return shape == kShape1d || shape == kShapeLinear;
  return geometry == shape;
}

Texture read_texture(Exec& e, uint64_t handle, uint32_t kind, uint32_t geometry, const char* what, int lane) {
  const Offsets& o = offsets();
  const uint8_t* raw = e.global(handle, kTextureBytes, lane);
  if (field<uint32_t>(raw, o.magic) != kTextureMagic || field<uint32_t>(raw, o.kind) != kind) {
    fault(kIllegalAddress, std::string(what) + " with the handle " + hex(handle) + ", which names no " +
                               (kind == kTextureKind ? "texture" : "surface") + " object", lane);
  }
  Texture t{};
  t.kind = kind;
  t.shape = field<uint32_t>(raw, o.shape);
  t.format = field<uint32_t>(raw, o.format);
  t.channels = field<uint32_t>(raw, o.channels);
  t.texel_bytes = field<uint32_t>(raw, o.texel_bytes);
  t.flags = field<uint32_t>(raw, o.flags);
  t.filter = field<uint32_t>(raw, o.filter);
  t.base = field<uint64_t>(raw, o.base);
  t.pitch = field<uint64_t>(raw, o.pitch);
  t.slice_pitch = field<uint64_t>(raw, o.slice_pitch);
  for (uint32_t i = 0; i < 3; ++i) t.size[i] = field<uint32_t>(raw, o.size[i]);
  t.layers = field<uint32_t>(raw, o.layers);
  for (uint32_t i = 0; i < 3; ++i) t.mode[i] = field<uint32_t>(raw, o.mode[i]);
  if (t.shape == kShapeCube || t.shape == kShapeLayeredCube) {
    for (uint32_t& mode : t.mode) mode = kClamp;   // a face's edge texel (no seamless filtering)
  }
  for (uint32_t i = 0; i < 4; ++i) t.border[i] = field<float>(raw, o.border[i]);
  if (!geometry_fits(geometry, t.shape)) {
    fault(kLaunchFailed, std::string(what) + "." + shape_name(geometry) + " on a " + shape_name(t.shape) + " " +
                             (kind == kTextureKind ? "texture" : "surface"), lane);
  }
  return t;
}

// The descriptor of each lane's handle, read once per distinct handle of the warp's
// instruction (a warp's lanes nearly always name the same object).
class Descriptors {
 public:
  Descriptors(Exec& e, uint32_t kind, uint32_t geometry, const char* what)
      : e_(e), kind_(kind), geometry_(geometry), what_(what) {}
  const Texture& of(uint64_t handle, int lane) {
    if (!valid_ || handle != handle_) {
      texture_ = read_texture(e_, handle, kind_, geometry_, what_, lane);
      handle_ = handle;
      valid_ = true;
    }
    return texture_;
  }

 private:
  Exec& e_;
  uint32_t kind_, geometry_;
  const char* what_;
  bool valid_ = false;
  uint64_t handle_ = 0;
  Texture texture_{};
};

// ---------------------------------------------------------------- texels

bool integer_result(const Texture& t) {
  switch (t.format) {
    case 0x03: case 0x0a: return true;                       // 32-bit integers
    case 0x01: case 0x02: case 0x08: case 0x09: return (t.flags & kReadAsInteger) != 0;
    default: return false;                                   // float, half, unorm/snorm
  }
}

// One texel's four channels: floats (as float bits) or integers, as the texture reads.
struct Texel {
  uint32_t v[4];
};

Texel zero_texel(bool integer) {
  Texel x{};
  if (!integer) {
    float one = 1.0f;
    std::memcpy(&x.v[3], &one, 4);
  } else {
    x.v[3] = 1;
  }
  return x;
}

float channel_float(uint32_t format, const uint8_t* p) {
  switch (format) {
    case 0x01: case 0xc0: case 0xc1: case 0xc2: return static_cast<float>(*p) / 255.0f;
    case 0x08: case 0xc6: case 0xc7: case 0xc8:
      return std::fmax(static_cast<float>(static_cast<int8_t>(*p)) / 127.0f, -1.0f);
    case 0x02: case 0xc3: case 0xc4: case 0xc5: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return static_cast<float>(v) / 65535.0f;
    }
    case 0x09: case 0xc9: case 0xca: case 0xcb: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return std::fmax(static_cast<float>(v) / 32767.0f, -1.0f);
    }
    case 0x10: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return static_cast<float>(half_to_double(h));
    }
    default: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
  }
}

uint32_t channel_integer(uint32_t format, const uint8_t* p) {
  switch (format) {
    case 0x01: return *p;
    case 0x08: return static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(*p)));
    case 0x02: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case 0x09: { int16_t v; std::memcpy(&v, p, 2); return static_cast<uint32_t>(static_cast<int32_t>(v)); }
    default: { uint32_t v; std::memcpy(&v, p, 4); return v; }
  }
}

Texel load_texel(Exec& e, const Texture& t, uint64_t address, bool integer, int lane) {
  const uint8_t* p = e.global(address, t.texel_bytes, lane);
  const uint32_t channel_bytes = t.texel_bytes / t.channels;
  Texel x = zero_texel(integer);
  for (uint32_t c = 0; c < t.channels && c < 4; ++c) {
    const uint8_t* at = p + c * channel_bytes;
    if (integer) {
      x.v[c] = channel_integer(t.format, at);
    } else {
      float f = channel_float(t.format, at);
      std::memcpy(&x.v[c], &f, 4);
    }
  }
  return x;
}

Texel border_texel(const Texture& t, bool integer) {
  Texel x{};
  for (int c = 0; c < 4; ++c) {
    if (integer) {
      x.v[c] = static_cast<uint32_t>(static_cast<int32_t>(t.border[c]));
    } else {
      std::memcpy(&x.v[c], &t.border[c], 4);
    }
  }
  return x;
}

// Texel index i of a dimension of n texels through address mode `mode`; -1: the border.
int64_t address(int64_t i, int64_t n, uint32_t mode, bool normalized) {
  if (!normalized && (mode == kWrap || mode == kMirror)) mode = kClamp;
  switch (mode) {
    case kWrap: {
      int64_t r = i % n;
      return r < 0 ? r + n : r;
    }
    case kMirror: {
      int64_t r = i % (2 * n);
      if (r < 0) r += 2 * n;
      return r < n ? r : 2 * n - 1 - r;
    }
    case kBorder: return i < 0 || i >= n ? -1 : i;
    default: return i < 0 ? 0 : (i >= n ? n - 1 : i);
  }
}

// The texel at integer place (x, y, z) of `layer` after address modes.
Texel texel_at(Exec& e, const Texture& t, const int64_t at[3], uint32_t dims, uint32_t layer, bool integer, int lane) {
  const bool normalized = (t.flags & kNormalizedCoordinates) != 0;
  if (t.shape == kShapeLinear) {
    if (at[0] < 0 || at[0] >= t.size[0]) return zero_texel(integer);   // a linear resource has no modes
    return load_texel(e, t, t.base + static_cast<uint64_t>(at[0]) * t.texel_bytes, integer, lane);
  }
  uint64_t offset = static_cast<uint64_t>(layer) * t.slice_pitch;
  for (uint32_t d = 0; d < dims; ++d) {
    const int64_t i = address(at[d], t.size[d], t.mode[d], normalized);
    if (i < 0) return border_texel(t, integer);
    const uint64_t step = d == 0 ? t.texel_bytes : (d == 1 ? t.pitch : t.slice_pitch);
    offset += static_cast<uint64_t>(i) * step;
  }
  return load_texel(e, t, t.base + offset, integer, lane);
}

float as_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The blend weight of linear filtering: 9-bit fixed point, 8 fractional bits.
float fixed_weight(float fraction) { return std::floor(fraction * 256.0f + 0.5f) / 256.0f; }

struct Place {
  float u[3];              // unnormalized coordinates
  int64_t index[3];        // integer coordinates (integer-coordinate fetches)
  uint32_t dims;
  uint32_t layer;
};

Texel fetch(Exec& e, const Texture& t, const Place& p, bool integer_coordinates, int lane) {
  const bool integer = integer_result(t);
  if (integer_coordinates) return texel_at(e, t, p.index, p.dims, p.layer, integer, lane);
  if (t.filter != kFilterLinear || integer) {
    int64_t at[3] = {0, 0, 0};
    for (uint32_t d = 0; d < p.dims; ++d) at[d] = static_cast<int64_t>(std::floor(p.u[d]));
    return texel_at(e, t, at, p.dims, p.layer, integer, lane);
  }
  int64_t low[3] = {0, 0, 0};
  float weight[3] = {0, 0, 0};
  for (uint32_t d = 0; d < p.dims; ++d) {
    const float b = p.u[d] - 0.5f;
    const float f = std::floor(b);
    low[d] = static_cast<int64_t>(f);
    weight[d] = fixed_weight(b - f);
  }
  float sum[4] = {0, 0, 0, 0};
  for (uint32_t corner = 0; corner < (1u << p.dims); ++corner) {
    int64_t at[3] = {0, 0, 0};
    float w = 1.0f;
    for (uint32_t d = 0; d < p.dims; ++d) {
      const bool high = (corner >> d) & 1;
      at[d] = low[d] + (high ? 1 : 0);
      w *= high ? weight[d] : 1.0f - weight[d];
    }
    const Texel x = texel_at(e, t, at, p.dims, p.layer, false, lane);
    for (int c = 0; c < 4; ++c) sum[c] += w * as_float(x.v[c]);
  }
  Texel out{};
  std::memcpy(out.v, sum, sizeof sum);
  return out;
}

// (face, s, t) of a cubemap direction, s and t normalized to [0, 1].
void cube_face(float x, float y, float z, uint32_t* face, float* s, float* t) {
  const float ax = std::fabs(x), ay = std::fabs(y), az = std::fabs(z);
  float sc, tc, ma;
  if (ax >= ay && ax >= az) {
    ma = ax;
    *face = x >= 0 ? 0 : 1;
    sc = x >= 0 ? -z : z;
    tc = -y;
  } else if (ay >= az) {
    ma = ay;
    *face = y >= 0 ? 2 : 3;
    sc = x;
    tc = y >= 0 ? z : -z;
  } else {
    ma = az;
    *face = z >= 0 ? 4 : 5;
    sc = z >= 0 ? x : -x;
    tc = -y;
  }
  if (ma == 0.0f) ma = 1.0f;
  *s = (sc / ma + 1.0f) * 0.5f;
  *t = (tc / ma + 1.0f) * 0.5f;
}

uint32_t clamp_layer(int64_t layer, uint32_t layers) {
  if (layer < 0 || layers == 0) return 0;
  return layer >= layers ? layers - 1 : static_cast<uint32_t>(layer);
}

// The place a tex/tld4 instruction names for lane l: its coordinates in op[5..7].
Place place_of(Exec& e, const Instr& in, const Texture& t, int l) {
  const bool integer_coordinates = (in.flags & kIntegerCoordinates) != 0;
  Place p{};
  uint32_t first = 5;
  const uint32_t geometry = static_cast<uint32_t>(in.imm);
  switch (geometry) {
    case kShape1d: case kShapeLayered1d: p.dims = 1; break;
    case kShape2d: case kShapeLayered2d: case kShapeCube: p.dims = 2; break;
    default: p.dims = 3; break;
  }
  if (geometry == kShapeLayered1d || geometry == kShapeLayered2d) {
    p.layer = clamp_layer(static_cast<int32_t>(e.lanes(in.op[5])[l]), t.layers);
    first = 6;
  }
  auto coordinate = [&](uint32_t i) { return e.lanes(in.op[first + i])[l]; };
  if (geometry == kShapeCube) {
    float s, u;
    uint32_t face;
    cube_face(as_float(static_cast<uint32_t>(coordinate(0))), as_float(static_cast<uint32_t>(coordinate(1))),
              as_float(static_cast<uint32_t>(coordinate(2))), &face, &s, &u);
    p.layer = face;
    p.u[0] = s * static_cast<float>(t.size[0]);
    p.u[1] = u * static_cast<float>(t.size[1]);
    return p;
  }
  const bool normalized = (t.flags & kNormalizedCoordinates) != 0;
  for (uint32_t d = 0; d < p.dims; ++d) {
    const uint64_t raw = coordinate(d);
    if (integer_coordinates) {
      p.index[d] = static_cast<int32_t>(raw);
    } else {
      float c = as_float(static_cast<uint32_t>(raw));
      if (normalized) {
        // Wrap and mirror repeat the normalized coordinate's fraction; the index
        // arithmetic in address() does the same to the texels linear filtering adds.
        c *= static_cast<float>(t.size[d]);
      }
      p.u[d] = c;
    }
  }
  return p;
}

EMU_HANDLER(h_tex) {
  const uint64_t* handle = e.lanes(in.op[4]);
  Descriptors descriptors(e, kTextureKind, static_cast<uint32_t>(in.imm), "tex");
  for_lanes(m, [&](int l) {
    const Texture& t = descriptors.of(handle[l], l);
    const Texel x = fetch(e, t, place_of(e, in, t, l), (in.flags & kIntegerCoordinates) != 0, l);
    for (int c = 0; c < 4; ++c) {
      if (in.op[c] != kNoSlot) e.lanes(in.op[c])[l] = x.v[c];
    }
  });
}

EMU_HANDLER(h_tld4) {
  const uint64_t* handle = e.lanes(in.op[4]);
  const int component = static_cast<int>(in.imm2);
  Descriptors descriptors(e, kTextureKind, kShape2d, "tld4");
  for_lanes(m, [&](int l) {
    const Texture& t = descriptors.of(handle[l], l);
    const Place p = place_of(e, in, t, l);
    const bool integer = integer_result(t);
    int64_t i0 = static_cast<int64_t>(std::floor(p.u[0] - 0.5f)), j0 = static_cast<int64_t>(std::floor(p.u[1] - 0.5f));
    const int64_t corners[4][3] = {{i0, j0 + 1, 0}, {i0 + 1, j0 + 1, 0}, {i0 + 1, j0, 0}, {i0, j0, 0}};
    for (int c = 0; c < 4; ++c) {
      const Texel x = texel_at(e, t, corners[c], 2, 0, integer, l);
      if (in.op[c] != kNoSlot) e.lanes(in.op[c])[l] = x.v[component];
    }
  });
}

// ---------------------------------------------------------------- surfaces

// Device address of a surface access of `bytes` at the instruction's coordinates
// for lane l; 0 when it falls outside and the mode is .zero.
uint64_t surface_address(Exec& e, const Instr& in, const Texture& t, uint32_t bytes, const char* what, int l) {
  const uint32_t geometry = static_cast<uint32_t>(in.imm);
  uint32_t first = 5;
  int64_t layer = 0;
  if (geometry == kShapeLayered1d || geometry == kShapeLayered2d) {
    layer = static_cast<int32_t>(e.lanes(in.op[5])[l]);
    first = 6;
  }
  const uint32_t dims = geometry == kShape3d ? 3 : (geometry == kShape2d || geometry == kShapeLayered2d ? 2 : 1);
  int64_t at[3] = {0, 0, 0};
  for (uint32_t d = 0; d < dims; ++d) at[d] = static_cast<int32_t>(e.lanes(in.op[first + d])[l]);
  const int64_t row_bytes = static_cast<int64_t>(t.size[0]) * t.texel_bytes;
  const int64_t limit[3] = {row_bytes - static_cast<int64_t>(bytes), static_cast<int64_t>(t.size[1]) - 1,
                            static_cast<int64_t>(t.size[2]) - 1};
  const int64_t layers = t.layers == 0 ? 1 : t.layers;
  bool outside = layer < 0 || layer >= layers;
  for (uint32_t d = 0; d < dims; ++d) outside = outside || at[d] < 0 || at[d] > limit[d];
  if (outside) {
    if (in.flags == kZeroOutside) return 0;
    if (in.flags == kTrap) {
      std::string where = std::to_string(at[0]);
      for (uint32_t d = 1; d < dims; ++d) where += ", " + std::to_string(at[d]);
      fault(kIllegalAddress, std::string(what) + " of " + std::to_string(bytes) + " bytes at (" + where +
                                 ") outside the surface (" + std::to_string(row_bytes) + " bytes by " +
                                 std::to_string(t.size[1]) + " by " + std::to_string(t.size[2]) + ", " +
                                 std::to_string(layers) + " layers)", l);
    }
    for (uint32_t d = 0; d < dims; ++d) at[d] = at[d] < 0 ? 0 : (at[d] > limit[d] ? limit[d] : at[d]);
    layer = layer < 0 ? 0 : (layer >= layers ? layers - 1 : layer);
  }
  return t.base + static_cast<uint64_t>(layer) * t.slice_pitch + static_cast<uint64_t>(at[0]) +
         static_cast<uint64_t>(at[1]) * t.pitch + static_cast<uint64_t>(at[2]) * t.slice_pitch;
}

EMU_HANDLER(h_suld) {
  const uint64_t* handle = e.lanes(in.op[4]);
  const uint32_t bytes = static_cast<uint32_t>(in.size) * in.width;
  Descriptors descriptors(e, kSurfaceKind, static_cast<uint32_t>(in.imm), "suld");
  for_lanes(m, [&](int l) {
    const Texture& t = descriptors.of(handle[l], l);
    const uint64_t at = surface_address(e, in, t, bytes, "suld", l);
    const uint8_t* p = at == 0 ? nullptr : e.global(at, bytes, l);
    for (uint32_t i = 0; i < in.width; ++i) {
      uint64_t v = 0;
      if (p != nullptr) std::memcpy(&v, p + i * in.size, in.size);
      e.lanes(in.op[i])[l] = v;
    }
  });
}

EMU_HANDLER(h_sust) {
  const uint64_t* handle = e.lanes(in.op[4]);
  const uint32_t bytes = static_cast<uint32_t>(in.size) * in.width;
  Descriptors descriptors(e, kSurfaceKind, static_cast<uint32_t>(in.imm), "sust");
  for_lanes(m, [&](int l) {
    const Texture& t = descriptors.of(handle[l], l);
    const uint64_t at = surface_address(e, in, t, bytes, "sust", l);
    if (at == 0) return;
    uint8_t* p = e.global(at, bytes, l);
    for (uint32_t i = 0; i < in.width; ++i) {
      const uint64_t v = e.lanes(in.op[i])[l];
      std::memcpy(p + i * in.size, &v, in.size);
    }
  });
}

const HandlerRegistrar registrar{
    EMU_ENTRY("tex", h_tex),
    EMU_ENTRY("tld4", h_tld4),
    EMU_ENTRY("suld", h_suld),
    EMU_ENTRY("sust", h_sust),
};

}  // namespace
}  // namespace tally::emu
