#include "memory/shared_objects.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "logging/log.h"

namespace tally::client {
namespace {
std::atomic<uint64_t> g_next_object{1};
}  // namespace

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

size_t page_round(size_t bytes) { return (bytes + page_size() - 1) & ~(page_size() - 1); }

int create_shared_object(size_t bytes, std::string* name) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/tally-pin-%d-%" PRIu64, static_cast<int>(getpid()),
                g_next_object.fetch_add(1, std::memory_order_relaxed));
  *name = buf;
  int fd = shm_open(buf, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    log_error("cannot create shared memory %s: %s", buf, std::strerror(errno));
    return -1;
  }
  // shm_open's mode passes through the umask; the server insists on exactly 0600.
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    log_error("cannot size shared memory %s to %zu bytes: %s", buf, bytes, std::strerror(errno));
    close(fd);
    shm_unlink(buf);
    return -1;
  }
  return fd;
}

void* map_new_shared_object(size_t bytes, std::string* name) {
  int fd = create_shared_object(bytes, name);
  if (fd < 0) return nullptr;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name->c_str());
    return nullptr;
  }
  madvise(p, bytes, MADV_DONTFORK);
  return p;
}

}  // namespace tally::client
