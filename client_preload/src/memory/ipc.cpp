// Interprocess handles (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle,
// cuIpcGetEventHandle, cuIpcOpenEventHandle) between jobs of the same tally-server.
// The 64-byte handle carries the server's export id and a random secret; the
// server checks both, so a forged or stale handle fails with INVALID_VALUE. An
// opened allocation has the same address as in its owner (one device address space).
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "memory/address_map.h"
#include "connection/connection.h"
#include "driver_objects.h"
#include "entry_points/entry_point.h"

namespace tally::client {
namespace {

constexpr char kMagic[8] = {'t', 'a', 'l', 'l', 'y', 'I', 'P', 'C'};

struct WireHandle {
  char magic[8];
  uint64_t export_id;
  uint64_t secret;
  char unused[40];
};
static_assert(sizeof(WireHandle) == sizeof(CUipcMemHandle) && sizeof(WireHandle) == sizeof(CUipcEventHandle));

template <class Handle>
void write_handle(Handle* out, const protocol::IpcHandleReplyMsg& reply) {
  WireHandle h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.export_id = reply.export_id;
  h.secret = reply.secret;
  std::memcpy(out, &h, sizeof h);
}

template <class Handle>
bool read_handle(const Handle& in, WireHandle* out) {
  std::memcpy(out, &in, sizeof *out);
  return std::memcmp(out->magic, kMagic, sizeof kMagic) == 0;
}

// How often each opened allocation is open here: its address is device memory for
// unified-addressing calls until the last close.
std::mutex g_open_mutex;
std::unordered_map<uint64_t, int> g_open;

CUresult open_memory(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned flags) {
  if (pdptr == nullptr || (flags & ~unsigned{CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS}) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  WireHandle h;
  if (!read_handle(handle, &h)) return CUDA_ERROR_INVALID_VALUE;
  protocol::IpcOpenMemReplyMsg out{};
  if (CUresult rc = request_reply(protocol::IpcOpenMemHandleMsg{h.export_id, h.secret}, protocol::MessageKind::IpcOpenMemReply,
                        &out);
      rc != CUDA_SUCCESS)
    return rc;
  {
    std::lock_guard<std::mutex> lock(g_open_mutex);
    if (g_open[out.dptr]++ == 0) device_ranges().add(out.dptr, out.bytes, DeviceRangeKind::kImported);
  }
  *pdptr = out.dptr;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuIpcGetMemHandle_v4010)(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  protocol::IpcHandleReplyMsg out{};
  if (CUresult rc = request_reply(protocol::IpcGetMemHandleMsg{dptr}, protocol::MessageKind::IpcHandleReply, &out);
      rc != CUDA_SUCCESS)
    return rc;
  write_handle(pHandle, out);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuIpcOpenMemHandle_v11000)(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return open_memory(pdptr, handle, Flags);
}
TALLY_ENTRY(cuIpcOpenMemHandle_v4010)(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return open_memory(pdptr, handle, Flags);
}

TALLY_ENTRY(cuIpcCloseMemHandle_v4010)(CUdeviceptr dptr) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = Connection::instance().request_done(protocol::IpcCloseMemHandleMsg{dptr});
  if (rc == CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lock(g_open_mutex);
    if (--g_open[dptr] <= 0) {
      g_open.erase(dptr);
      device_ranges().remove(dptr);
      forget_pointer_settings(dptr);
    }
  }
  return rc;
}

TALLY_ENTRY(cuIpcGetEventHandle_v4010)(CUipcEventHandle* pHandle, CUevent event) {
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  EventObject* e = as_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if ((e->flags & CU_EVENT_INTERPROCESS) == 0) return CUDA_ERROR_INVALID_VALUE;
  protocol::IpcHandleReplyMsg out{};
  if (CUresult rc = request_reply(protocol::IpcGetEventHandleMsg{e->id}, protocol::MessageKind::IpcHandleReply, &out);
      rc != CUDA_SUCCESS)
    return rc;
  write_handle(pHandle, out);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuIpcOpenEventHandle_v4010)(CUevent* phEvent, CUipcEventHandle handle) {
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  WireHandle h;
  if (!read_handle(handle, &h)) return CUDA_ERROR_INVALID_VALUE;
  EventObject* event = new_event_object(CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
  CUresult rc =
      Connection::instance().request_done(protocol::IpcOpenEventHandleMsg{event->id, h.export_id, h.secret});
  if (rc != CUDA_SUCCESS) {
    event->tag.store(ObjectTag::kDead);
    return rc;
  }
  *phEvent = reinterpret_cast<CUevent>(event);
  return CUDA_SUCCESS;
}
