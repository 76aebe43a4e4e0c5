// The client built without CUPTI's headers (a toolkit that lacks them: CMake says so
// when it configures). Then tally defines no cupti* functions, a job that uses CUPTI
// gets NVIDIA's (which cannot start its activity API under tally, and says so), and
// the launches, copies and memsets are never timed.
#include "cupti/callbacks.h"
#include "cupti/device_work.h"

namespace tally::client::cupti {

DeviceWork::DeviceWork(uint64_t stream, LaunchCall call) : stream_(stream), call_(call) {}
DeviceWork::~DeviceWork() = default;
void DeviceWork::kernel(CUresult, const KernelLaunch&) {}
void DeviceWork::memcpy(CUresult, CopyKind, bool, size_t, bool) {}
void DeviceWork::memset(CUresult, uint32_t, size_t, bool) {}
void DeviceWork::finish(CUresult, int, const void*) {}

void context_created(CUcontext) {}
void context_destroy_starting(CUcontext) {}

}  // namespace tally::client::cupti
