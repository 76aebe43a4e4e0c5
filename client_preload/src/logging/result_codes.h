// Every CUresult with its name and the driver's text for it (generated/result_codes.cpp,
// by tools/gen_client_table.py), for cuGetErrorName and cuGetErrorString.
#pragma once

namespace tally::client {

struct ResultCode {
  int value;
  const char* name;         // "CUDA_ERROR_INVALID_VALUE"
  const char* text;         // cuGetErrorString's: the driver's (the runtime's for the number), else cuda.h's
  const char* description;  // cuda.h's documentation of the value
};

extern const ResultCode kResultCodes[];
extern const int kResultCodeCount;

}  // namespace tally::client
