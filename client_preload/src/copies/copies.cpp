#include "copies/copies.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "memory/address_map.h"
#include "graphs/capture.h"
#include "connection/connection.h"
#include "cupti/device_work.h"

namespace tally::client {
namespace {

using protocol::CopyDest;
using protocol::CopySource;

// A chunk never takes more than a quarter of an arena, so several threads (and the
// server's releases) keep flowing while one copy is large.
size_t chunk_limit(uint64_t arena_capacity) {
  return static_cast<size_t>(std::min<uint64_t>(arena_capacity / 4, uint64_t{16} << 20));
}

// A piece of a rectangle that fits one chunk: rows [row, row + rows), bytes
// [column, column + width) of each row.
struct Piece {
  size_t row, rows, column, width;
};

template <class Fn>
CUresult for_each_piece(size_t width, size_t height, size_t limit, Fn&& fn) {
  if (width <= limit) {
    const size_t rows_per_piece = std::max<size_t>(limit / width, 1);
    for (size_t row = 0; row < height; row += rows_per_piece) {
      if (CUresult rc = fn(Piece{row, std::min(rows_per_piece, height - row), 0, width}); rc != CUDA_SUCCESS) return rc;
    }
    return CUDA_SUCCESS;
  }
  for (size_t row = 0; row < height; ++row) {
    for (size_t column = 0; column < width; column += limit) {
      if (CUresult rc = fn(Piece{row, 1, column, std::min(limit, width - column)}); rc != CUDA_SUCCESS) return rc;
    }
  }
  return CUDA_SUCCESS;
}

void pack_rows(uint8_t* out, const uint8_t* src, size_t pitch, const Piece& p) {
  for (size_t r = 0; r < p.rows; ++r) std::memcpy(out + r * p.width, src + (p.row + r) * pitch + p.column, p.width);
}

void unpack_rows(uint8_t* dst, size_t pitch, const uint8_t* in, const Piece& p) {
  for (size_t r = 0; r < p.rows; ++r) std::memcpy(dst + (p.row + r) * pitch + p.column, in + r * p.width, p.width);
}

size_t span_bytes(size_t width, size_t height, size_t pitch) { return (height - 1) * pitch + width; }

// Pinned memory the server maps, holding the whole host rectangle, if any.
std::optional<RangeMap<PinnedRegion>::Found> pinned(const void* address, size_t width, size_t height, size_t pitch) {
  auto found = pinned_ranges().find(reinterpret_cast<uint64_t>(address), span_bytes(width, height, pitch));
  if (found && found->value.region == 0) return std::nullopt;  // registered, but not shared: pageable path
  return found;
}

CUresult send_or_wait(const protocol::MemcpyHtoDMsg& m, bool async, const void* tail = nullptr,
                      uint32_t tail_size = 0) {
  Connection& c = Connection::instance();
  return async ? c.send(m, tail, tail_size) : c.request_done(m, tail, tail_size);
}

// A captured copy's node: what cuGraphExecUpdate checks and cuGraphDebugDotPrint shows.
void describe_copy(GraphNode* node, CUmemorytype from, CUmemorytype to, size_t width, size_t height) {
  node->type = CU_GRAPH_NODE_TYPE_MEMCPY;
  node->copy = CopyNodeShape{from, to, width, height};
}

}  // namespace

// Addresses the job names that are neither its device memory nor mapped in this
// process count as device addresses: the server then refuses them
// (CUDA_ERROR_INVALID_VALUE) instead of this process faulting on them. Real
// unified addressing reserves every device range in the job's address space; the
// server's ranges are not reserved here, so this is how foreign device memory
// (another job's allocation) is told apart from host memory.
bool is_device_address(uint64_t address) {
  if (device_ranges().find(address)) return true;
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  unsigned char resident = 0;
  return mincore(reinterpret_cast<void*>(address & ~(page - 1)), 1, &resident) != 0 && errno == ENOMEM;
}

// Each copy and memset as it is sent; copy_host_to_device() and its kin, at the end
// of this file, wrap them in tally's CUPTI timing.
static CUresult untimed_copy_host_to_device(
    DeviceRect dst, HostRect src, size_t width, size_t height, uint64_t stream, bool async) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (src.address == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc; captured(stream, async, &rc, [=](GraphNode& node) {
        describe_copy(&node, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, width, height);
        node.ops.push_back([=](uint64_t s) { return copy_host_to_device(dst, src, width, height, s, true); });
      }))
    return rc;
  if (height == 1) src.pitch = dst.pitch = width;
  Connection& c = Connection::instance();
  if (CUresult rc = c.usable(); rc != CUDA_SUCCESS) return rc;
  const auto* bytes = static_cast<const uint8_t*>(src.address);

  protocol::MemcpyHtoDMsg m{};
  m.stream = stream;
  if (auto region = pinned(src.address, width, height, src.pitch)) {
    m.source = static_cast<uint32_t>(CopySource::PINNED);
    m.region = region->value.region;
    const uint64_t base = reinterpret_cast<uint64_t>(bytes) - region->start;
    if (src.pitch == width) {
      m.dst = dst.address, m.width = width, m.height = height, m.dst_pitch = dst.pitch, m.region_offset = base;
      return send_or_wait(m, async);
    }
    // Pinned rows that are not packed: one in-place copy per row; a synchronous
    // copy waits on the last one (the server answers once the stream ran it).
    for (size_t row = 0; row < height; ++row) {
      m.dst = dst.address + row * dst.pitch, m.width = width, m.height = 1, m.dst_pitch = width;
      m.region_offset = base + row * src.pitch;
      if (CUresult rc = send_or_wait(m, async || row + 1 < height); rc != CUDA_SUCCESS) return rc;
    }
    return CUDA_SUCCESS;
  }

  const size_t total = width * height;
  if (total <= kInlineCopyBytes) {
    uint8_t packed[kInlineCopyBytes];
    pack_rows(packed, bytes, src.pitch, Piece{0, height, 0, width});
    m.source = static_cast<uint32_t>(CopySource::INLINE);
    m.dst = dst.address, m.width = width, m.height = height, m.dst_pitch = dst.pitch;
    return send_or_wait(m, async, packed, static_cast<uint32_t>(total));
  }
  m.source = static_cast<uint32_t>(CopySource::ARENA);
  return for_each_piece(width, height, chunk_limit(c.upload_capacity()), [&](const Piece& p) -> CUresult {
    m.dst = dst.address + p.row * dst.pitch + p.column;
    m.width = p.width, m.height = p.rows, m.dst_pitch = dst.pitch;
    uint64_t tag = 0;
    {
      std::lock_guard<std::mutex> lock(c.upload_mutex());
      uint8_t* chunk = nullptr;
      if (CUresult rc = c.reserve_upload(p.width * p.rows, &m.arena_offset, &chunk); rc != CUDA_SUCCESS) return rc;
      pack_rows(chunk, bytes, src.pitch, p);
      CUresult rc = c.post(static_cast<uint32_t>(m.kKind), &m, sizeof m, nullptr, 0, async ? nullptr : &tag);
      if (rc != CUDA_SUCCESS) return rc;
    }
    if (async) return CUDA_SUCCESS;
    Reply reply;
    CUresult rc = c.wait(tag, static_cast<uint32_t>(m.kKind), &reply);
    return rc == CUDA_SUCCESS ? Connection::expect_kind(reply, protocol::MessageKind::Done, 0) : rc;
  });
}

static CUresult untimed_copy_device_to_host(
    HostRectOut dst, DeviceRect src, size_t width, size_t height, uint64_t stream, bool async) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (dst.address == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc; captured(stream, async, &rc, [=](GraphNode& node) {
        describe_copy(&node, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, width, height);
        node.ops.push_back([=](uint64_t s) { return copy_device_to_host(dst, src, width, height, s, true); });
      }))
    return rc;
  if (height == 1) src.pitch = dst.pitch = width;
  Connection& c = Connection::instance();
  if (CUresult rc = c.usable(); rc != CUDA_SUCCESS) return rc;
  auto* bytes = static_cast<uint8_t*>(dst.address);

  protocol::MemcpyDtoHMsg m{};
  m.stream = stream;
  if (auto region = pinned(dst.address, width, height, dst.pitch)) {
    m.dest = static_cast<uint32_t>(CopyDest::PINNED);
    m.region = region->value.region;
    const uint64_t base = reinterpret_cast<uint64_t>(bytes) - region->start;
    const bool packed = dst.pitch == width;
    const size_t pieces = packed ? 1 : height;
    for (size_t i = 0; i < pieces; ++i) {
      m.src = src.address + i * src.pitch, m.width = width, m.height = packed ? height : 1, m.src_pitch = src.pitch;
      m.region_offset = base + i * dst.pitch;
      const bool last = i + 1 == pieces;
      CUresult rc = async || !last ? c.send(m) : c.request_done(m);
      if (rc != CUDA_SUCCESS) return rc;
    }
    return CUDA_SUCCESS;
  }

  // Pageable memory: the bytes come back through the download arena, so the
  // call returns only once they are here (CUDA's rule for pageable memory too).
  m.dest = static_cast<uint32_t>(CopyDest::ARENA);
  return for_each_piece(width, height, chunk_limit(c.download_capacity()), [&](const Piece& p) -> CUresult {
    m.src = src.address + p.row * src.pitch + p.column;
    m.width = p.width, m.height = p.rows, m.src_pitch = src.pitch;
    Reply reply;
    if (CUresult rc = c.request(m, &reply); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = Connection::expect_kind(reply, protocol::MessageKind::MemcpyDtoHReply,
                                              sizeof(protocol::MemcpyDtoHReplyMsg));
        rc != CUDA_SUCCESS)
      return rc;
    protocol::MemcpyDtoHReplyMsg chunk{};
    std::memcpy(&chunk, reply.payload.data(), sizeof chunk);
    if (chunk.size != p.width * p.rows || chunk.arena_offset + chunk.size > c.download_capacity()) {
      c.release_download(chunk.arena_offset);
      return Connection::expect_kind(Reply{}, protocol::MessageKind::MemcpyDtoHReply, 0);
    }
    unpack_rows(bytes, dst.pitch, c.download_data(chunk.arena_offset), p);
    c.release_download(chunk.arena_offset);
    return CUDA_SUCCESS;
  });
}

static CUresult untimed_copy_device_to_device(
    DeviceRect dst, DeviceRect src, size_t width, size_t height, uint64_t stream, bool async) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (CUresult rc; captured(stream, async, &rc, [=](GraphNode& node) {
        describe_copy(&node, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE, width, height);
        node.copy.dst = dst.address, node.copy.src = src.address;
        node.copy.dst_pitch = dst.pitch, node.copy.src_pitch = src.pitch;
        node.ops.push_back([=](uint64_t s) { return copy_device_to_device(dst, src, width, height, s, true); });
      }))
    return rc;
  if (height == 1) src.pitch = dst.pitch = width;
  Connection& c = Connection::instance();
  protocol::MemcpyDtoDMsg m{};
  m.dst = dst.address, m.src = src.address, m.width = width, m.height = height;
  m.dst_pitch = dst.pitch, m.src_pitch = src.pitch, m.stream = stream;
  return async ? c.send(m) : c.request_done(m);
}

CUresult copy_host_to_host(HostRectOut dst, HostRect src, size_t width, size_t height, uint64_t stream) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (dst.address == nullptr || src.address == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc; captured(stream, true, &rc, [=](GraphNode& node) {
        describe_copy(&node, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_HOST, width, height);
        node.ops.push_back([=](uint64_t s) { return copy_host_to_host(dst, src, width, height, s); });
      }))
    return rc;
  // Earlier work on the stream may still write either buffer (pinned memory).
  protocol::StreamSynchronizeMsg m{stream};
  if (CUresult rc = Connection::instance().request_done(m); rc != CUDA_SUCCESS) return rc;
  for (size_t row = 0; row < height; ++row) {
    std::memmove(static_cast<uint8_t*>(dst.address) + row * dst.pitch,
                 static_cast<const uint8_t*>(src.address) + row * src.pitch, width);
  }
  return CUDA_SUCCESS;
}

static CUresult untimed_memset_device(
    DeviceRect dst, uint32_t value, unsigned element_size, size_t width, size_t height, uint64_t stream,
    bool async) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (CUresult rc; captured(stream, async, &rc, [=](GraphNode& node) {
        node.type = CU_GRAPH_NODE_TYPE_MEMSET;
        node.memset = MemsetNodeShape{dst.address, dst.pitch, value, element_size, width, height};
        node.ops.push_back([=](uint64_t s) { return memset_device(dst, value, element_size, width, height, s, true); });
      }))
    return rc;
  return send_memset(dst, value, element_size, width, height, stream, async);
}

CUresult send_memset(DeviceRect dst, uint32_t value, unsigned element_size, size_t width, size_t height,
                     uint64_t stream, bool async) {
  if (height == 1) dst.pitch = width * element_size;
  Connection& c = Connection::instance();
  protocol::MemsetMsg m{};
  m.dst = dst.address, m.value = value, m.element_size = element_size;
  m.width = width, m.height = height, m.pitch = dst.pitch, m.stream = stream;
  return async ? c.send(m) : c.request_done(m);
}

// The entry points' copies and memsets, each timed for tally's CUPTI when a
// profiler asked for memcpy or memset records (cupti/device_work.h).
namespace {

bool host_pinned(const void* address, size_t width, size_t height, size_t pitch) {
  return pinned(address, width, height, pitch).has_value();
}

}  // namespace

CUresult copy_host_to_device(DeviceRect dst, HostRect src, size_t width, size_t height, uint64_t stream,
                             bool async) {
  cupti::DeviceWork work(stream, cupti::LaunchCall::kNone);
  const CUresult rc = untimed_copy_host_to_device(dst, src, width, height, stream, async);
  if (work.active())
    work.memcpy(rc, cupti::CopyKind::kHostToDevice, host_pinned(src.address, width, height, src.pitch),
                width * height, async);
  return rc;
}

CUresult copy_device_to_host(HostRectOut dst, DeviceRect src, size_t width, size_t height, uint64_t stream,
                             bool async) {
  cupti::DeviceWork work(stream, cupti::LaunchCall::kNone);
  const CUresult rc = untimed_copy_device_to_host(dst, src, width, height, stream, async);
  if (work.active())
    work.memcpy(rc, cupti::CopyKind::kDeviceToHost, host_pinned(dst.address, width, height, dst.pitch),
                width * height, async);
  return rc;
}

CUresult copy_device_to_device(DeviceRect dst, DeviceRect src, size_t width, size_t height, uint64_t stream,
                               bool async) {
  cupti::DeviceWork work(stream, cupti::LaunchCall::kNone);
  const CUresult rc = untimed_copy_device_to_device(dst, src, width, height, stream, async);
  if (work.active()) work.memcpy(rc, cupti::CopyKind::kDeviceToDevice, false, width * height, async);
  return rc;
}

CUresult memset_device(DeviceRect dst, uint32_t value, unsigned element_size, size_t width, size_t height,
                       uint64_t stream, bool async) {
  cupti::DeviceWork work(stream, cupti::LaunchCall::kNone);
  const CUresult rc = untimed_memset_device(dst, value, element_size, width, height, stream, async);
  if (work.active()) work.memset(rc, value, static_cast<size_t>(width) * height * element_size, async);
  return rc;
}

}  // namespace tally::client
