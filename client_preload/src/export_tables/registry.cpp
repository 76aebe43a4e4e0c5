// cuGetExportTable: hands out the private tables by UUID (docs/export-tables.md says
// which runtime asks for which). Unknown UUIDs (cudart 13 also asks for
// f8cff951-2146-8b4e-b9e2-fb469e7c0dd9, NVRTC 13 for da9151d3-3ae6-cc41-a5c0-4f26d533e328,
// and both cope without them) get CUDA_ERROR_NOT_FOUND, which is what they were
// measured to accept.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "entry_points/entry_point.h"
#include "export_tables/export_tables.h"
#include "logging/log.h"
#include "logging/trace.h"

namespace tally::client::export_tables {
namespace {

struct Known {
  unsigned char uuid[16];
  const char* name;
  Table (*table)();
};

const Known kKnown[] = {
    {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},
     "runtime interface", &runtime_interface},
    {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
     "tools runtime hooks", &tools_runtime_hooks},
    {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc},
     "tools TLS", &tools_tls},
    {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
     "context-local storage", &context_local_storage},
    {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e},
     "context checks", &context_checks},
    {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
     "integrity check", &integrity_check},
    {{0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2},
     "tools context", &tools_context},
    {{0x7c, 0xb6, 0x3f, 0x9b, 0x9c, 0xa4, 0x8e, 0x42, 0xa4, 0x84, 0xbe, 0xb6, 0x6e, 0x6a, 0xed, 0x7f},
     "CUPTI", &tools_cupti},
    {{0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e},
     "cuFFT kernels", &fft_kernels},
};

// Asked for by libraries that carry on without them: not worth a log line.
const unsigned char kOptional[][16] = {
    // cudart 12.9 on
    {0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9},
    // NVRTC 13 and nvJitLink 13 (libnvrtc.so.13, libnvJitLink.so.13 hold this UUID), as
    // CuPy compiles a kernel: it compiles and links as before
    {0xda, 0x91, 0x51, 0xd3, 0x3a, 0xe6, 0xcc, 0x41, 0xa5, 0xc0, 0x4f, 0x26, 0xd5, 0x33, 0xe3, 0x28},
};

bool optional_table(const unsigned char* id) {
  return std::any_of(std::begin(kOptional), std::end(kOptional),
                     [id](const unsigned char(&uuid)[16]) { return std::memcmp(id, uuid, sizeof uuid) == 0; });
}

// Whether `id` is an unknown table not asked for before (each is logged once).
bool first_time_unknown(const unsigned char* id) {
  static std::mutex mutex;
  static std::vector<std::array<unsigned char, 16>> seen;
  std::array<unsigned char, 16> key;
  std::memcpy(key.data(), id, key.size());
  std::lock_guard<std::mutex> lock(mutex);
  if (std::find(seen.begin(), seen.end(), key) != seen.end() || seen.size() >= 64) return false;
  seen.push_back(key);
  return true;
}

void format_uuid(const unsigned char* b, char (&out)[37]) {
  std::snprintf(out, sizeof out, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

}  // namespace
}  // namespace tally::client::export_tables

TALLY_ENTRY(cuGetExportTable_v3000)(const void** ppExportTable, const CUuuid* pExportTableId) {
  using namespace tally::client::export_tables;
  if (ppExportTable == nullptr || pExportTableId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* id = reinterpret_cast<const unsigned char*>(pExportTableId->bytes);
  for (const Known& known : kKnown) {
    if (std::memcmp(known.uuid, id, sizeof known.uuid) == 0) {
      *ppExportTable = static_cast<const void*>(known.table());
      if (tally::client::trace_calls()) {
        char text[37];
        format_uuid(id, text);
        tally::client::trace_line("cuGetExportTable %s -> %s", text, known.name);
      }
      return CUDA_SUCCESS;
    }
  }
  *ppExportTable = nullptr;
  char text[37];
  format_uuid(id, text);
  if (tally::client::trace_calls()) tally::client::trace_line("cuGetExportTable %s -> not found", text);
  if (!optional_table(id) && first_time_unknown(id)) {
    tally::client::log_error("a library asked the driver for its private table %s, which tally does not have "
                             "(docs/export-tables.md); answering CUDA_ERROR_NOT_FOUND", text);
  }
  return CUDA_ERROR_NOT_FOUND;
}
