// Every CUresult with its name and description, generated from cuda.h
// (generated/result_codes.cpp), for cuGetErrorName and cuGetErrorString.
#pragma once

namespace tally::client {

struct ResultCode {
  int value;
  const char* name;         // "CUDA_ERROR_INVALID_VALUE"
  const char* description;  // cuda.h's documentation of the value
};

extern const ResultCode kResultCodes[];
extern const int kResultCodeCount;

}  // namespace tally::client
