// cuGetErrorName / cuGetErrorString, answered in the client from the generated
// table: the driver's short texts, which the toolkit's runtime carries for the same
// numbers ("invalid argument"), else cuda.h's documentation of the value. An unknown
// value is CUDA_ERROR_INVALID_VALUE with *pStr set to NULL, as the driver documents.
#include <algorithm>

#include "entry_points/entry_point.h"
#include "logging/result_codes.h"

namespace tally::client {
namespace {

const ResultCode* find_code(CUresult error) {
  const ResultCode* end = kResultCodes + kResultCodeCount;
  const ResultCode* it = std::lower_bound(kResultCodes, end, static_cast<int>(error),
                                          [](const ResultCode& code, int value) { return code.value < value; });
  return it != end && it->value == static_cast<int>(error) ? it : nullptr;
}

}  // namespace
}  // namespace tally::client

TALLY_ENTRY(cuGetErrorName_v6000)(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const tally::client::ResultCode* code = tally::client::find_code(error);
  *pStr = code != nullptr ? code->name : nullptr;
  return code != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TALLY_ENTRY(cuGetErrorString_v6000)(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const tally::client::ResultCode* code = tally::client::find_code(error);
  *pStr = code != nullptr ? code->text : nullptr;
  return code != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
