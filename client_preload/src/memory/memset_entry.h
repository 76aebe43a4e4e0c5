// What every cuMemsetD* entry does (generated/memset_entries.cpp holds the 24
// entries, written by tools/gen_client_table.py from their typedefs).
#pragma once
#include <cstddef>
#include <cstdint>

#include "driver_headers.h"

namespace tally::client {

// Fills `height` rows of `width` elements of `element_size` bytes, rows `pitch`
// bytes apart (a 1-D fill is one row), with `value`, as one Memset request on
// `stream`. The synchronous forms (async false) return once the server has checked
// the destination and queued the fill: CUDA's memsets of device memory are
// asynchronous with respect to the host.
CUresult memset_entry(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned element_size, size_t width,
                      size_t height, CUstream stream, bool per_thread, bool async);

}  // namespace tally::client
