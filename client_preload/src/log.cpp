#include "log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <algorithm>
#include <cstdio>

namespace tally::client {

void log_error(const char* format, ...) {
  char line[1024];
  int n = std::snprintf(line, sizeof(line), "tally: ");
  va_list ap;
  va_start(ap, format);
  int m = std::vsnprintf(line + n, sizeof(line) - n - 1, format, ap);
  va_end(ap);
  size_t len = m < 0 ? n : std::min<size_t>(n + m, sizeof(line) - 2);
  line[len++] = '\n';
  int saved = errno;  // logging must not disturb the caller's errno
  ssize_t unused = ::write(STDERR_FILENO, line, len);
  (void)unused;
  errno = saved;
}

}  // namespace tally::client
