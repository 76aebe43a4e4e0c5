#include "logging/failure_reports.h"

#include <mutex>
#include <set>
#include <utility>

#include "entry_points/entry_point.h"
#include "logging/log.h"
#include "tally/protocol_generated.h"

namespace tally::client {
namespace {

bool is_expected_answer(uint32_t request_kind, CUresult status) {
  return status == CUDA_ERROR_NOT_READY ||
         (status == CUDA_ERROR_ALREADY_MAPPED &&
          request_kind == static_cast<uint32_t>(protocol::MessageKind::MemAllocManaged));
}

}  // namespace

void report_failure(uint32_t request_kind, CUresult status, const std::string& explanation) {
  if (is_expected_answer(request_kind, status)) return;
  static std::mutex mutex;
  static auto* reported = new std::set<std::pair<uint32_t, int>>();  // never destroyed: calls may come at exit
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!reported->emplace(request_kind, static_cast<int>(status)).second) return;
  }
  const char* request = protocol::message_name(request_kind);
  const char* error = nullptr;
  if (tally_entry_cuGetErrorName_v6000(status, &error) != CUDA_SUCCESS) error = "an unknown error";
  log_error("%s failed with %s (%d): %s (shown once per request and error)", request != nullptr ? request : "a request",
            error, static_cast<int>(status), explanation.empty() ? "the server gave no reason" : explanation.c_str());
}

}  // namespace tally::client
