#include "modules/jit_records.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "logging/trace.h"

namespace tally::client {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
constexpr size_t kMaxRecordBytes = size_t{64} << 20;  // records.py: MAX_RECORD_BYTES
constexpr uint8_t kElfMagic[4] = {0x7f, 'E', 'L', 'F'};

uint64_t fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = kFnvOffset;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

}  // namespace

std::string jit_record_name(const uint8_t* image, size_t size) {
  char name[64];
  std::snprintf(name, sizeof name, "%016llx-%llx.rec", static_cast<unsigned long long>(fnv1a64(image, size)),
                static_cast<unsigned long long>(size));
  return name;
}

std::vector<uint8_t> jit_record_for(const uint8_t* image, size_t size) {
  const char* dir = std::getenv("TALLY_JIT_CAPTURE_DIR");
  if (dir == nullptr || *dir == '\0' || size < 4 || std::memcmp(image, kElfMagic, 4) != 0) return {};
  const std::string path = std::string(dir) + "/" + jit_record_name(image, size);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::vector<uint8_t> out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
      static_cast<size_t>(st.st_size) <= kMaxRecordBytes) {
    out.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < out.size()) {
      const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (got != out.size()) out.clear();
  }
  if (!out.empty()) ::futimens(fd, nullptr);  // now: the cache trims the least recently used first
  ::close(fd);
  if (!out.empty()) trace_line("module: JIT-capture record %s (%zu bytes) goes with the cubin", path.c_str(), out.size());
  return out;
}

}  // namespace tally::client
