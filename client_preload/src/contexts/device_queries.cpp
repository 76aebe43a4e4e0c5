// Device queries, answered from the snapshot the server sent at handshake: their
// answers never change, so they cost no round trip (DESIGN.md, "Data flow").
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>

#include "connection/connection.h"
#include "entry_points/entry_point.h"

namespace tally::client {
namespace {

// CUDA_SUCCESS when `dev` names a device of the snapshot, else the driver's error.
CUresult check_device(CUdevice dev) {
  const Connection& c = Connection::instance();
  if (CUresult rc = c.usable(); rc != CUDA_SUCCESS) return rc;
  return dev >= 0 && dev < c.device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

const protocol::DeviceInfoMsg& snapshot() { return Connection::instance().device(); }

CUresult device_uuid(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  std::memcpy(uuid->bytes, snapshot().uuid, sizeof uuid->bytes);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace tally::client

using tally::client::check_device;
using tally::client::Connection;
using tally::client::snapshot;

TALLY_ENTRY(cuDeviceGetCount_v2000)(int* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  *count = Connection::instance().device_count();
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDeviceGet_v2000)(CUdevice_v1* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(ordinal); rc != CUDA_SUCCESS) return rc;
  *device = ordinal;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDeviceGetAttribute_v2000)(int* pi, CUdevice_attribute attrib, CUdevice_v1 dev) {
  if (pi == nullptr || attrib < 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  constexpr int kSlots = sizeof(snapshot().attributes) / sizeof(snapshot().attributes[0]);
  static_assert(CU_DEVICE_ATTRIBUTE_MAX <= kSlots, "DeviceInfo.attributes has too few slots for this CUDA");
  *pi = snapshot().attributes[attrib];
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDeviceGetName_v2000)(char* name, int len, CUdevice_v1 dev) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  const auto& d = snapshot();
  size_t n = strnlen(reinterpret_cast<const char*>(d.name), sizeof d.name);
  n = std::min<size_t>(n, static_cast<size_t>(len) - 1);
  std::memcpy(name, d.name, n);
  name[n] = '\0';
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDeviceGetUuid_v9020)(CUuuid* uuid, CUdevice_v1 dev) { return tally::client::device_uuid(uuid, dev); }
TALLY_ENTRY(cuDeviceGetUuid_v11040)(CUuuid* uuid, CUdevice_v1 dev) { return tally::client::device_uuid(uuid, dev); }

TALLY_ENTRY(cuDeviceTotalMem_v3020)(size_t* bytes, CUdevice_v1 dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  *bytes = snapshot().total_memory;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDeviceTotalMem_v2000)(unsigned int* bytes, CUdevice_v1 dev) {
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  uint64_t total = snapshot().total_memory;  // the 32-bit form saturates
  *bytes = total > UINT_MAX ? UINT_MAX : static_cast<unsigned int>(total);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDeviceComputeCapability_v2000)(int* major, int* minor, CUdevice_v1 dev) {
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  *major = snapshot().cc_major;
  *minor = snapshot().cc_minor;
  return CUDA_SUCCESS;
}

// "[domain]:[bus]:[device].[function]" in hexadecimal, 13 bytes with the NUL (cuda.h).
TALLY_ENTRY(cuDeviceGetPCIBusId_v4010)(char* pciBusId, int len, CUdevice_v1 dev) {
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  const auto& d = snapshot();
  std::snprintf(pciBusId, static_cast<size_t>(len), "%04x:%02x:%02x.0", static_cast<unsigned>(d.pci_domain),
                static_cast<unsigned>(d.pci_bus), static_cast<unsigned>(d.pci_device));
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuDeviceGetByPCIBusId_v4010)(CUdevice_v1* dev, const char* pciBusId) {
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  // Accepted forms: domain:bus:device.function and bus:device.function.
  if (std::sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) {
    domain = 0;
    if (std::sscanf(pciBusId, "%x:%x.%x", &bus, &device, &function) != 3) return CUDA_ERROR_INVALID_VALUE;
  }
  const auto& d = snapshot();
  if (Connection::instance().device_count() == 0 || domain != static_cast<unsigned>(d.pci_domain) ||
      bus != static_cast<unsigned>(d.pci_bus) || device != static_cast<unsigned>(d.pci_device))
    return CUDA_ERROR_INVALID_DEVICE;
  *dev = 0;
  return CUDA_SUCCESS;
}
