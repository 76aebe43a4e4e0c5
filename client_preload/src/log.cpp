#include "log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <algorithm>
#include <cstdio>

namespace tally::client {

void write_line(int fd, const char* prefix, const char* format, va_list ap) {
  char line[1024];
  int n = std::snprintf(line, sizeof(line), "%s", prefix);
  int m = std::vsnprintf(line + n, sizeof(line) - n - 1, format, ap);
  size_t len = m < 0 ? n : std::min<size_t>(n + m, sizeof(line) - 2);
  line[len++] = '\n';
  int saved = errno;  // logging must not disturb the caller's errno
  ssize_t unused = ::write(fd, line, len);
  (void)unused;
  errno = saved;
}

void log_error(const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  write_line(STDERR_FILENO, "tally: ", format, ap);
  va_end(ap);
}

}  // namespace tally::client
