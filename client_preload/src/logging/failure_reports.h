// Why a call failed, on the job's stderr without a trace flag: the first time a
// request fails with a given error, one "tally:" line (also in the driver's error
// log, error_logs.h) names the request, the error and the server's explanation
// (an unsupported PTX instruction, memory the job does not own, a kernel's fault
// found at the next synchronizing call...). Repeats of the same request and error
// print nothing; TALLY_CLIENT_TRACE shows every failure. Answers that are not
// failures (CUDA_ERROR_NOT_READY from a query, the managed allocation's
// CUDA_ERROR_ALREADY_MAPPED retry) print nothing, as in the server's log
// (tally/server/failures.py).
#pragma once
#include <cstdint>
#include <string>

#include "driver_headers.h"

namespace tally::client {

// The server answered request `request_kind` with `status` and `explanation`.
void report_failure(uint32_t request_kind, CUresult status, const std::string& explanation);

}  // namespace tally::client
