#include "logging/log.h"

#include "logging/error_logs.h"

#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <algorithm>
#include <cstdio>

namespace tally::client {

namespace {

void write_message(int fd, const char* format, ...) __attribute__((format(printf, 2, 3)));
void write_message(int fd, const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  write_line(fd, "", format, ap);
  va_end(ap);
}

}  // namespace

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
  const int saved = errno;
  char message[1024];
  va_list ap;
  va_start(ap, format);
  const int n = std::vsnprintf(message, sizeof message, format, ap);
  va_end(ap);
  const size_t length = n < 0 ? 0 : std::min<size_t>(n, sizeof message - 1);
  write_message(STDERR_FILENO, "tally: %.*s", static_cast<int>(length), message);
  record_error_log(message, length);
  errno = saved;
}

}  // namespace tally::client
