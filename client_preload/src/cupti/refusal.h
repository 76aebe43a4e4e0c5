// How tally's CUPTI refuses what it cannot do: once per reason, a line on the
// job's stderr naming the call and why, then the CUPTI error the caller gets.
#pragma once
#include "cupti/cupti_headers.h"

namespace tally::client::cupti {

CUptiResult refuse(const char* call, const char* reason, CUptiResult result = CUPTI_ERROR_NOT_SUPPORTED);

}  // namespace tally::client::cupti
