// The driver's error log (cuLogs*): the messages tally itself reports to the job
// (log_error: unsupported functions, unknown export-table slots, ...), kept in a
// bounded buffer the application can read with cuLogsDumpToMemory/ToFile and
// handed to the callbacks it registered with cuLogsRegisterCallback.
#pragma once
#include <cstddef>

namespace tally::client {

// Appends one message (no trailing newline) and calls the registered callbacks.
void record_error_log(const char* message, size_t length);

}  // namespace tally::client
