#include "logging/trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "logging/log.h"

namespace tally::client {
namespace detail {

std::atomic<int> g_trace_fd{kTraceUnread};

int read_trace_setting() {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  int fd = g_trace_fd.load(std::memory_order_acquire);
  if (fd != kTraceUnread) return fd;
  const char* value = std::getenv("TALLY_CLIENT_TRACE");
  if (value == nullptr || value[0] == '\0' || std::strcmp(value, "0") == 0) {
    fd = -1;
  } else if (std::strcmp(value, "1") == 0) {
    fd = STDERR_FILENO;
  } else {
    fd = ::open(value, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      log_error("cannot open TALLY_CLIENT_TRACE file %s (%s); tracing to stderr instead", value,
                std::strerror(errno));
      fd = STDERR_FILENO;
    }
  }
  g_trace_fd.store(fd, std::memory_order_release);
  return fd;
}

}  // namespace detail

void trace_line(const char* format, ...) {
  if (!trace_calls()) return;
  va_list ap;
  va_start(ap, format);
  write_line(detail::g_trace_fd.load(std::memory_order_relaxed), "tally-trace: ", format, ap);
  va_end(ap);
}

CUresult trace_result(const char* symbol, CUresult result) {
  trace_line("%s -> %d", symbol, static_cast<int>(result));
  return result;
}

}  // namespace tally::client
