// How many bytes a module image handed to the driver spans. The driver API passes
// images by pointer alone; the size comes from the image itself:
//   fatbin      16-byte header: u32 magic 0xBA55ED50, u16 version, u16 header size,
//               u64 size of what follows
//   fatbin wrapper (what cudart registers): {u32 magic 0x466243b1, u32 version,
//               u64 pointer to a fatbin, u64 ...}: the fatbin it points at. In a
//               version-2 wrapper (an -rdc program's) the last field points at the
//               NULL-terminated array of its translation units' relocatable fatbins
//               (crt/link.stub fills it in __cudaRegisterLinkedBinary_*)
//   ELF cubin   the furthest end of its section contents and headers
//   PTX         NUL-terminated text (the NUL is sent too: drivers expect it)
#pragma once
#include <cstddef>
#include <cstdint>

namespace tally::client {

struct ModuleImage {
  const uint8_t* data = nullptr;  // the bytes to send (a wrapper is resolved to its fatbin)
  size_t size = 0;
  const char* error = nullptr;    // why the image was not understood (data is null then)
  const uint64_t* prelinked = nullptr;  // version-2 wrapper: its relocatable fatbins, NULL-terminated
};

// Bytes of the fatbin at `p` (header included); 0 if it is not a fatbin.
size_t fatbin_bytes(const void* p);

ModuleImage find_module_image(const void* image);

}  // namespace tally::client
