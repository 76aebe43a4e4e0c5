// The table from (name, ABI version, per-thread-stream variant) to our functions.
// Rows are generated (generated/entry_table.cpp) from cudaTypedefs.h; lookup follows
// cuGetProcAddress's documented rules.
#pragma once
#include <cstdint>

#include "driver_headers.h"

namespace tally::client {

struct EntryPoint {
  const char* name;        // what cuGetProcAddress is asked for: "cuMemAlloc"
  int version;             // ABI version of this form: 3020
  bool per_thread_stream;  // the _ptsz/_ptds form
  bool implemented;        // false: the generated NOT_SUPPORTED stand-in
  const char* symbol;      // exported C name of this form: "cuMemAlloc_v2"
  void* function;
  void* traced_function;   // same, logging each call (TALLY_CLIENT_TRACE)
};

extern const EntryPoint kEntryPoints[];

struct EntryLookup {
  const EntryPoint* entry;  // nullptr unless status is SUCCESS
  CUdriverProcAddressQueryResult status;
};

// The newest form of `name` whose ABI version is <= cuda_version. With
// per_thread_stream, a _ptsz/_ptds form is preferred when one qualifies; otherwise
// the legacy form is returned (as the driver does).
EntryLookup lookup_entry(const char* name, int cuda_version, bool per_thread_stream);

}  // namespace tally::client
