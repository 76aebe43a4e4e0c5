// Messages to the job's stderr, prefixed "tally:". One write(2) per line, so lines
// from several threads never interleave, and no iostreams (usable at any point of
// process start-up or shutdown).
#pragma once

namespace tally::client {

void log_error(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace tally::client
