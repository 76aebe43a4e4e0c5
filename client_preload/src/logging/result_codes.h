// Every CUresult with its name and the driver's text for it (generated/result_codes.cpp,
// by tools/gen_client_table.py), for cuGetErrorName and cuGetErrorString.
#pragma once

namespace tally::client {

struct ResultCode {
  int value;
  const char* name;         // "CUDA_ERROR_INVALID_VALUE"
  const char* description;  // the driver's text (the runtime's for the number), else cuda.h's documentation
};

extern const ResultCode kResultCodes[];
extern const int kResultCodeCount;

}  // namespace tally::client
