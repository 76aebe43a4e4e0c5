// Messages to the job's stderr, prefixed "tally:", and to the driver error log
// the application can read (cuLogs*, error_logs.h). One write(2) per line, so lines
// from several threads never interleave, and no iostreams (usable at any point of
// process start-up or shutdown).
#pragma once

#include <cstdarg>

namespace tally::client {

void log_error(const char* format, ...) __attribute__((format(printf, 1, 2)));

// One "<prefix><message>\n" line to fd, in one write(2), errno left untouched
// (shared by log_error and the call trace).
void write_line(int fd, const char* prefix, const char* format, va_list ap);

}  // namespace tally::client
