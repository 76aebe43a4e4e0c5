// libnvidia-ml.so.1 for jobs under tally-run: the NVML a job's libraries find on
// LD_LIBRARY_PATH (tally/lib, first), answering about the device tally's libcuda
// shows the job, from that libcuda. XLA (JAX) loads NVML before it makes its CUDA
// client and gives up without it ("No visible GPU devices" on a machine without
// NVIDIA's driver, where tally runs on its emulator); on a GPU machine it would
// otherwise read the physical GPU, not the device the job shares through tally.
//
// Only the calls whose answer tally knows are here: initialization, the driver's
// versions, the device count, handles (by index and by PCI bus id), index, name,
// UUID and compute capability; and the calls PyTorch's CUDA driver layer
// (c10/cuda/driver_api.cpp) requires to exist before it uses expandable segments,
// whose honest answer for tally's device is "not supported": it has no NVLink, no
// fabric, and its processes are the server's. A library that needs more finds the
// symbol missing, as it would in an older NVML.
#include <cstdio>
#include <cstring>

#include "driver_headers.h"

namespace {

using nvmlReturn_t = int;
constexpr nvmlReturn_t kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3,
                       kNotFound = 6, kInsufficientSize = 7, kDriverNotLoaded = 9, kUnknown = 999;

// An nvmlDevice_t: a pointer to one of these.
struct Device {
  int ordinal;
};
constexpr int kMaxDevices = 16;
Device g_devices[kMaxDevices] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};
bool g_initialized = false;

nvmlReturn_t from_cuda(CUresult rc) { return rc == CUDA_SUCCESS ? kSuccess : kUnknown; }

const Device* device_of(void* handle) {
  auto* d = static_cast<const Device*>(handle);
  return d >= g_devices && d < g_devices + kMaxDevices ? d : nullptr;
}

nvmlReturn_t copy_string(const char* value, char* out, unsigned length) {
  if (out == nullptr) return kInvalidArgument;
  if (std::strlen(value) + 1 > length) return kInsufficientSize;
  std::memcpy(out, value, std::strlen(value) + 1);
  return kSuccess;
}

// The kernel-mode driver a CUDA release needs at least on Linux (NVIDIA's release
// notes): what a job under tally is told it runs on. Unknown releases: not supported.
const char* linux_driver_for(int cuda_version) {
  switch (cuda_version) {
    case 12040: return "550.54.14";
    case 12060: return "560.28.03";
    case 13000: return "580.65.06";
    default: return nullptr;
  }
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2() {
  if (cuInit(0) != CUDA_SUCCESS) return kDriverNotLoaded;
  g_initialized = true;
  return kSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlInit() { return nvmlInit_v2(); }
__attribute__((visibility("default"))) nvmlReturn_t nvmlInitWithFlags(unsigned int) { return nvmlInit_v2(); }
__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown() {
  if (!g_initialized) return kUninitialized;
  return kSuccess;   // (NVML counts inits; one shutdown after several leaves tally's answers the same)
}

__attribute__((visibility("default"))) const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kNotFound: return "Not Found";
    case kInsufficientSize: return "Insufficient Size";
    case kDriverNotLoaded: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  if (version == nullptr) return kInvalidArgument;
  return from_cuda(cuDriverGetVersion(version));
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return nvmlSystemGetCudaDriverVersion(version);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (!g_initialized) return kUninitialized;
  int cuda = 0;
  if (cuDriverGetVersion(&cuda) != CUDA_SUCCESS) return kUnknown;
  const char* linux_driver = linux_driver_for(cuda);
  return linux_driver == nullptr ? kNotSupported : copy_string(linux_driver, version, length);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!g_initialized) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  int n = 0;
  if (CUresult rc = cuDeviceGetCount(&n); rc != CUDA_SUCCESS) return from_cuda(rc);
  *count = static_cast<unsigned>(n < kMaxDevices ? n : kMaxDevices);
  return kSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  return nvmlDeviceGetCount_v2(count);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  unsigned count = 0;
  if (nvmlReturn_t rc = nvmlDeviceGetCount_v2(&count); rc != kSuccess) return rc;
  if (device == nullptr || index >= count) return kInvalidArgument;
  *device = &g_devices[index];
  return kSuccess;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, void** device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetIndex(void* device, unsigned int* index) {
  const Device* d = device_of(device);
  if (d == nullptr || index == nullptr) return kInvalidArgument;
  *index = static_cast<unsigned>(d->ordinal);
  return kSuccess;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  const Device* d = device_of(device);
  if (d == nullptr || name == nullptr) return kInvalidArgument;
  char text[256] = {};
  if (CUresult rc = cuDeviceGetName(text, sizeof text, d->ordinal); rc != CUDA_SUCCESS) return from_cuda(rc);
  return copy_string(text, name, length);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  const Device* d = device_of(device);
  if (d == nullptr || uuid == nullptr) return kInvalidArgument;
  CUuuid id{};
  if (CUresult rc = cuDeviceGetUuid_v2(&id, d->ordinal); rc != CUDA_SUCCESS) return from_cuda(rc);
  const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
  char text[48];
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return copy_string(text, uuid, length);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCudaComputeCapability(void* device, int* major,
                                                                                       int* minor) {
  const Device* d = device_of(device);
  if (d == nullptr || major == nullptr || minor == nullptr) return kInvalidArgument;
  if (CUresult rc = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->ordinal);
      rc != CUDA_SUCCESS)
    return from_cuda(rc);
  return from_cuda(cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->ordinal));
}

// The device whose cuDeviceGetPCIBusId matches (domain:bus:device.function, compared
// without case: NVML's own form has 8 hex digits of domain, CUDA's 4).
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pci_bus_id,
                                                                                     void** device) {
  if (!g_initialized) return kUninitialized;
  if (pci_bus_id == nullptr || device == nullptr) return kInvalidArgument;
  unsigned want_domain = 0, want_bus = 0, want_device = 0, want_function = 0;
  if (std::sscanf(pci_bus_id, "%x:%x:%x.%x", &want_domain, &want_bus, &want_device, &want_function) != 4)
    return kInvalidArgument;
  unsigned count = 0;
  if (nvmlReturn_t rc = nvmlDeviceGetCount_v2(&count); rc != kSuccess) return rc;
  for (unsigned i = 0; i < count; ++i) {
    char text[32] = {};
    unsigned domain = 0, bus = 0, dev = 0, function = 0;
    if (cuDeviceGetPCIBusId(text, sizeof text, static_cast<CUdevice>(i)) != CUDA_SUCCESS) continue;
    if (std::sscanf(text, "%x:%x:%x.%x", &domain, &bus, &dev, &function) != 4) continue;
    if (domain == want_domain && bus == want_bus && dev == want_device && function == want_function) {
      *device = &g_devices[i];
      return kSuccess;
    }
  }
  return kNotFound;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pci_bus_id,
                                                                                  void** device) {
  return nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id, device);
}

// No NVLink, no multi-node fabric, and no per-process accounting on tally's device.
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(void* device, unsigned int,
                                                                                        int* type) {
  return device_of(device) == nullptr || type == nullptr ? kInvalidArgument : kNotSupported;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(void* device, unsigned int,
                                                                                        void* pci) {
  return device_of(device) == nullptr || pci == nullptr ? kInvalidArgument : kNotSupported;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(void* device, void* info) {
  return device_of(device) == nullptr || info == nullptr ? kInvalidArgument : kNotSupported;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(void* device,
                                                                                         unsigned int* count,
                                                                                         void*) {
  return device_of(device) == nullptr || count == nullptr ? kInvalidArgument : kNotSupported;
}

}  // extern "C"
