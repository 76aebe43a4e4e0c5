// TALLY_CLIENT_TRACE: a log of every entry-point lookup and call, for seeing what a
// runtime (cudart, Triton, ...) asks of the driver. Unset, empty or "0": off.
// "1": to stderr. Anything else: a file path to append to. Lines start "tally-trace:".
// When off, cuGetProcAddress hands out the untraced functions, so tracing costs
// nothing unless it is on.
#pragma once
#include <atomic>

#include "driver_headers.h"

namespace tally::client {

namespace detail {
constexpr int kTraceUnread = -2;
extern std::atomic<int> g_trace_fd;  // -1: off; kTraceUnread: env not read yet
int read_trace_setting();
}  // namespace detail

inline bool trace_calls() {
  int fd = detail::g_trace_fd.load(std::memory_order_acquire);
  if (fd == detail::kTraceUnread) fd = detail::read_trace_setting();
  return fd >= 0;
}

void trace_line(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Logs "<symbol> -> <result>" and passes the result through.
CUresult trace_result(const char* symbol, CUresult result);

}  // namespace tally::client
