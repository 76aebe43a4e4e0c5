#include "jit_capture/jit_records.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>

#include "jit_capture/sha256.h"
#include "logging/trace.h"

namespace tally::client {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
constexpr size_t kMaxRecordBytes = size_t{64} << 20;  // records.py: MAX_RECORD_BYTES
constexpr size_t kDefaultCacheBytes = size_t{256} << 20;  // records.py: DEFAULT_MAX_BYTES
constexpr char kMagic[] = "tally-jit-ptx 1\n";             // records.py: MAGIC
constexpr uint8_t kElfMagic[4] = {0x7f, 'E', 'L', 'F'};

uint64_t fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = kFnvOffset;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

const char* capture_dir() {
  const char* dir = std::getenv("TALLY_JIT_CAPTURE_DIR");
  return dir != nullptr && *dir != '\0' ? dir : nullptr;
}

// TALLY_JIT_CACHE_MAX_BYTES, as records.py's max_bytes reads it.
size_t cache_bound() {
  const char* text = std::getenv("TALLY_JIT_CACHE_MAX_BYTES");
  if (text == nullptr || *text == '\0') return kDefaultCacheBytes;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  return errno == 0 && end != text && *end == '\0' ? static_cast<size_t>(value) : kDefaultCacheBytes;
}

// mkdir -p with mode 0700 for what it makes.
bool make_dirs(const std::string& path) {
  for (size_t at = path.find('/', 1);; at = path.find('/', at + 1)) {
    const std::string part = path.substr(0, at);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return false;
    if (at == std::string::npos) return true;
  }
}

bool write_all(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// records.py's trim: the oldest records go until the rest fit in `limit`; `keep` stays.
void trim(const std::string& dir, size_t limit, const std::string& keep) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::tuple<int64_t, std::string, size_t>> found;  // (mtime ns, name, size)
  size_t total = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".rec") != 0) continue;
    struct stat st {};
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    found.emplace_back(int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec, name, st.st_size);
    total += static_cast<size_t>(st.st_size);
  }
  ::closedir(d);
  std::sort(found.begin(), found.end());
  for (const auto& [mtime, name, size] : found) {
    if (total <= limit) break;
    if (name == keep) continue;
    ::unlink((dir + "/" + name).c_str());  // gone already: another writer's trim took it
    total -= size;
  }
}

}  // namespace

bool jit_capture_on() { return capture_dir() != nullptr; }

std::string jit_record_name(const uint8_t* image, size_t size) {
  char name[64];
  std::snprintf(name, sizeof name, "%016llx-%llx.rec", static_cast<unsigned long long>(fnv1a64(image, size)),
                static_cast<unsigned long long>(size));
  return name;
}

std::vector<uint8_t> jit_record_for(const uint8_t* image, size_t size) {
  const char* dir = capture_dir();
  if (dir == nullptr || size < 4 || std::memcmp(image, kElfMagic, 4) != 0) return {};
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

std::vector<uint8_t> image_with_jit_record(const uint8_t* image, size_t size, uint32_t* record_size) {
  std::vector<uint8_t> out = jit_record_for(image, size);
  *record_size = static_cast<uint32_t>(out.size());
  if (!out.empty()) out.insert(out.begin(), image, image + size);
  return out;
}

bool jit_record_store(const uint8_t* cubin, size_t size, const char* ptx, size_t ptx_size, const char* producer) {
  const char* dir = capture_dir();
  if (dir == nullptr || size < 4 || std::memcmp(cubin, kElfMagic, 4) != 0) return false;
  const std::string folder = dir;
  const std::string name = jit_record_name(cubin, size);
  const std::string path = folder + "/" + name;
  const size_t limit = cache_bound();
  // Written whole each time, as records.py's store does: a record already there under
  // this name (the same cubin asked for again, or another whose key collides) is replaced.
  std::string record = kMagic;
  record += "cubin-sha256 " + sha256_hex(cubin, size) + "\n";
  record += std::string("producer ") + producer + "\n\n";
  record.append(ptx, ptx_size);
  if (record.size() > std::min(limit, kMaxRecordBytes) || !make_dirs(folder)) {
    trace_line("jit capture: the record of %s not written (%zu bytes; bound %zu, or the folder cannot be made)",
               path.c_str(), record.size(), limit);
    return false;
  }
  std::string part = folder + "/.part-XXXXXX";
  const int fd = ::mkstemp(part.data());
  if (fd < 0) return false;
  const bool written = write_all(fd, record.data(), record.size());
  ::close(fd);
  // renamed whole: a job loading the cubin at the same time never reads half a record
  if (!written || ::rename(part.c_str(), path.c_str()) != 0) {
    ::unlink(part.c_str());
    return false;
  }
  trim(folder, limit, name);
  trace_line("jit capture: recorded %s (%s, %zu bytes of PTX)", path.c_str(), producer, ptx_size);
  return true;
}

}  // namespace tally::client
