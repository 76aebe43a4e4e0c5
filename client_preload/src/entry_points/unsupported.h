// What a driver entry point tally does not implement does: say so once, fail cleanly.
#pragma once
#include <atomic>

#include "driver_headers.h"

namespace tally::client {

// A flag that is constant-initialized (usable from static initializers and from
// any thread without a guard) and set exactly once.
class OnceFlag {
 public:
  constexpr OnceFlag() = default;
  // True for the first caller only.
  bool first() { return !done_.exchange(true, std::memory_order_relaxed); }

 private:
  std::atomic<bool> done_{false};
};

// Logs "tally: <symbol> is not supported: <reason> ..." the first time, returns
// CUDA_ERROR_NOT_SUPPORTED. The reasons are tools/unsupported_reasons.py's.
CUresult unsupported_entry(OnceFlag& logged, const char* symbol, const char* reason);

}  // namespace tally::client
