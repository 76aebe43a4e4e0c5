#include "modules/module_images.h"

#include <algorithm>
#include <cstring>

namespace tally::client {
namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint32_t kWrapperMagic = 0x466243B1;
constexpr uint32_t kLinkWrapperVersion = 2;  // FATBINC_LINK_VERSION (fatbinary_section.h)
constexpr uint8_t kElfMagic[4] = {0x7f, 'E', 'L', 'F'};
// Bounds for what a sane image header may claim; beyond them the pointer is
// probably not an image at all.
constexpr uint64_t kMaxImageBytes = uint64_t{4} << 30;

template <class T>
T read(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

ModuleImage fatbin(const uint8_t* p) {
  const uint16_t header = read<uint16_t>(p + 6);
  const uint64_t body = read<uint64_t>(p + 8);
  if (header < 16 || body > kMaxImageBytes) return {nullptr, 0, "fatbin header with an impossible size"};
  return {p, header + body, nullptr};
}

// ELF64 little-endian: the image ends where the last section's contents or the
// section/program header tables end.
ModuleImage elf(const uint8_t* p) {
  if (p[4] != 2 || p[5] != 1) return {nullptr, 0, "only 64-bit little-endian ELF cubins are supported"};
  const uint64_t phoff = read<uint64_t>(p + 0x20), shoff = read<uint64_t>(p + 0x28);
  const uint16_t phentsize = read<uint16_t>(p + 0x36), phnum = read<uint16_t>(p + 0x38);
  const uint16_t shentsize = read<uint16_t>(p + 0x3a), shnum = read<uint16_t>(p + 0x3c);
  if (shoff > kMaxImageBytes || phoff > kMaxImageBytes || shentsize < 64)
    return {nullptr, 0, "ELF header with impossible offsets"};
  uint64_t end = std::max<uint64_t>({64, shoff + uint64_t{shnum} * shentsize, phoff + uint64_t{phnum} * phentsize});
  constexpr uint32_t kNoBits = 8;
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint8_t* sh = p + shoff + uint64_t{i} * shentsize;
    const uint32_t type = read<uint32_t>(sh + 4);
    const uint64_t offset = read<uint64_t>(sh + 0x18), size = read<uint64_t>(sh + 0x20);
    if (type != kNoBits && offset + size > end) end = offset + size;
  }
  if (end > kMaxImageBytes) return {nullptr, 0, "ELF image larger than 4 GiB"};
  return {p, end, nullptr};
}

}  // namespace

size_t fatbin_bytes(const void* p) {
  if (p == nullptr || read<uint32_t>(static_cast<const uint8_t*>(p)) != kFatbinMagic) return 0;
  return fatbin(static_cast<const uint8_t*>(p)).size;
}

ModuleImage find_module_image(const void* image) {
  const auto* p = static_cast<const uint8_t*>(image);
  if (p == nullptr) return {nullptr, 0, "no image"};
  const uint32_t magic = read<uint32_t>(p);
  if (magic == kFatbinMagic) return fatbin(p);
  if (magic == kWrapperMagic) {
    const auto* target = reinterpret_cast<const uint8_t*>(read<uint64_t>(p + 8));
    if (target == nullptr || read<uint32_t>(target) != kFatbinMagic)
      return {nullptr, 0, "fatbin wrapper that does not point at a fatbin"};
    ModuleImage found = fatbin(target);
    if (read<uint32_t>(p + 4) == kLinkWrapperVersion) found.prelinked = reinterpret_cast<const uint64_t*>(read<uint64_t>(p + 16));
    return found;
  }
  if (std::memcmp(p, kElfMagic, 4) == 0) return elf(p);
  // Anything else must be PTX text.
  const size_t n = strnlen(reinterpret_cast<const char*>(p), kMaxImageBytes);
  if (n == kMaxImageBytes) return {nullptr, 0, "PTX text without a terminating NUL"};
  return {p, n + 1, nullptr};
}

}  // namespace tally::client
