// How an implemented driver entry point is written:
//
//   TALLY_ENTRY(cuMemAlloc_v3020)(CUdeviceptr_v2* dptr, size_t bytesize) { ... }
//
// The name is the cudaTypedefs.h typedef without PFN_ (ABI version and _ptsz/_ptds
// suffix included). tools/gen_client_table.py finds these definitions, puts them in
// the cuGetProcAddress table and behind the exported C symbols, and stops
// generating the NOT_SUPPORTED stand-in. The generated prototype is extern "C", so
// parameters that differ from the typedef are a compile error, not a silent overload.
// Write TALLY_ENTRY at the start of a line: the generator looks for it there.
#pragma once
#include "generated/entry_points.h"

#define TALLY_ENTRY(entry) extern "C" CUresult tally_entry_##entry
