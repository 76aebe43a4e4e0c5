// Copies and memsets in the server's terms: rectangles of `height` rows of `width`
// bytes (elements for memset), rows `pitch` apart. 1-D calls are one row.
//
// Where host bytes travel:
//   pinned host memory (address_map's pinned ranges): named by region and offset,
//     read/written in place by the server in stream order;
//   pageable memory: up to kInlineCopyBytes in the request itself, else through the
//     upload/download arenas in chunks. Host-to-device copies from pageable memory
//     return once the server took the bytes (as CUDA does); device-to-host copies
//     into pageable memory return once the bytes arrived, even the Async forms
//     (as CUDA does).
#pragma once
#include <cstddef>
#include <cstdint>

#include "driver_headers.h"

namespace tally::client {

constexpr size_t kInlineCopyBytes = 8 << 10;

struct DeviceRect {
  uint64_t address;
  size_t pitch;
};
struct HostRect {
  const void* address;
  size_t pitch;
};
struct HostRectOut {
  void* address;
  size_t pitch;
};

CUresult copy_host_to_device(DeviceRect dst, HostRect src, size_t width, size_t height, uint64_t stream,
                             bool async);
CUresult copy_device_to_host(HostRectOut dst, DeviceRect src, size_t width, size_t height, uint64_t stream,
                             bool async);
CUresult copy_device_to_device(DeviceRect dst, DeviceRect src, size_t width, size_t height, uint64_t stream,
                               bool async);
// Both sides in host memory (cuMemcpy with two host pointers): in stream order.
CUresult copy_host_to_host(HostRectOut dst, HostRect src, size_t width, size_t height, uint64_t stream);

CUresult memset_device(DeviceRect dst, uint32_t value, unsigned element_size, size_t width, size_t height,
                       uint64_t stream, bool async);
// The memset sent as it is, never taken into a capture: tally's own writes (a
// conditional handle's first value), which are not the job's work on `stream`.
CUresult send_memset(DeviceRect dst, uint32_t value, unsigned element_size, size_t width, size_t height,
                     uint64_t stream, bool async);

// Unified addressing: a device address is one inside the client's device ranges.
bool is_device_address(uint64_t address);

}  // namespace tally::client
