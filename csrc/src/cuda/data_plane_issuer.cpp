// The cuda backend's issuer: the driver itself, the very libcuda.so.1 that
// cuda-bindings (tally/backends/cuda.py) loaded, so both planes use one context
// and one set of streams. Under the nested cuda-backend test that library is
// tally's own client (the server runs under tally-run), and it works the same.
#include <cuda.h>
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include "cuda/data_plane_issuer.h"

namespace tally::data_plane {

namespace {

template <class Fn>
Fn symbol(void* library, const char* name) {
  void* p = dlsym(library, name);
  if (p == nullptr)
    throw std::runtime_error(std::string("the CUDA driver library has no ") + name +
                             "; the C++ data plane needs a driver of CUDA 12 or newer");
  return reinterpret_cast<Fn>(p);
}

}  // namespace

struct CudaIssuer::Driver {
  decltype(&::cuCtxSetCurrent) ctx_set_current;
  decltype(&::cuLaunchKernel) launch_kernel;
  decltype(&::cuLaunchKernelEx) launch_kernel_ex;
  decltype(&::cuMemsetD8Async) memset_d8;
  decltype(&::cuMemsetD16Async) memset_d16;
  decltype(&::cuMemsetD32Async) memset_d32;
  decltype(&::cuMemcpyDtoDAsync) copy_dtod;
  decltype(&::cuMemcpyHtoDAsync) copy_htod;
  decltype(&::cuStreamQuery) stream_query;
  decltype(&::cuGraphLaunch) graph_launch;
};

CudaIssuer::CudaIssuer(uint64_t context) : context_(context), driver_(new Driver) {
  // RTLD_NOLOAD: the library the process already has (cuda-bindings opened it by this name).
  library_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (library_ == nullptr) library_ = dlopen("libcuda.so.1", RTLD_NOW);
  if (library_ == nullptr) throw std::runtime_error(std::string("cannot open libcuda.so.1: ") + dlerror());
  Driver& d = *driver_;
  d.ctx_set_current = symbol<decltype(d.ctx_set_current)>(library_, "cuCtxSetCurrent");
  d.launch_kernel = symbol<decltype(d.launch_kernel)>(library_, "cuLaunchKernel");
  d.launch_kernel_ex = symbol<decltype(d.launch_kernel_ex)>(library_, "cuLaunchKernelEx");
  d.memset_d8 = symbol<decltype(d.memset_d8)>(library_, "cuMemsetD8Async");
  d.memset_d16 = symbol<decltype(d.memset_d16)>(library_, "cuMemsetD16Async");
  d.memset_d32 = symbol<decltype(d.memset_d32)>(library_, "cuMemsetD32Async");
  d.copy_dtod = symbol<decltype(d.copy_dtod)>(library_, "cuMemcpyDtoDAsync_v2");
  d.copy_htod = symbol<decltype(d.copy_htod)>(library_, "cuMemcpyHtoDAsync_v2");
  d.stream_query = symbol<decltype(d.stream_query)>(library_, "cuStreamQuery");
  d.graph_launch = symbol<decltype(d.graph_launch)>(library_, "cuGraphLaunch");
}

CudaIssuer::~CudaIssuer() {
  if (library_ != nullptr) dlclose(library_);
}

// Each thread that calls the driver needs the server's context current, as the
// Python backend makes it current on each of its threads.
bool CudaIssuer::current() {
  thread_local uint64_t bound = 0;
  const uint64_t context = context_.load(std::memory_order_acquire);
  if (bound == context) return true;
  if (driver_->ctx_set_current(reinterpret_cast<CUcontext>(context)) != CUDA_SUCCESS) return false;
  bound = context;
  return true;
}

bool CudaIssuer::launch(uint64_t stream, const FunctionEntry& fn, const LaunchShape& s, const uint8_t* params,
                        uint32_t param_bytes, uint32_t sm_cap) {
  if (sm_cap != 0 || !current()) return false;
  static const uint8_t kNoParams = 0;
  size_t size = param_bytes;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<uint8_t*>(param_bytes ? params : &kNoParams),
                   CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  if (s.cluster[0] != 0) {
    // A cluster launch, which the driver checks. Beyond the portable 8 blocks the
    // kernel's NON_PORTABLE attribute must be set on this side first: Python does that.
    if (uint64_t{s.cluster[0]} * s.cluster[1] * s.cluster[2] > 8) return false;
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = s.cluster[0];
    attr.value.clusterDim.y = s.cluster[1];
    attr.value.clusterDim.z = s.cluster[2];
    CUlaunchConfig config{};
    config.gridDimX = s.grid[0], config.gridDimY = s.grid[1], config.gridDimZ = s.grid[2];
    config.blockDimX = s.block[0], config.blockDimY = s.block[1], config.blockDimZ = s.block[2];
    config.sharedMemBytes = s.shared_bytes;
    config.hStream = reinterpret_cast<CUstream>(stream);
    config.attrs = &attr;
    config.numAttrs = 1;
    return driver_->launch_kernel_ex(&config, reinterpret_cast<CUfunction>(fn.native), nullptr, extra) ==
           CUDA_SUCCESS;
  }
  // The driver copies the parameter buffer before cuLaunchKernel returns.
  return driver_->launch_kernel(reinterpret_cast<CUfunction>(fn.native), s.grid[0], s.grid[1], s.grid[2], s.block[0],
                                s.block[1], s.block[2], s.shared_bytes, reinterpret_cast<CUstream>(stream), nullptr,
                                extra) == CUDA_SUCCESS;
}

bool CudaIssuer::memset(uint64_t stream, uint64_t dst, uint32_t value, uint32_t element_size, uint64_t count) {
  if (!current()) return false;
  auto s = reinterpret_cast<CUstream>(stream);
  switch (element_size) {
    case 1: return driver_->memset_d8(dst, static_cast<unsigned char>(value), count, s) == CUDA_SUCCESS;
    case 2: return driver_->memset_d16(dst, static_cast<unsigned short>(value), count, s) == CUDA_SUCCESS;
    case 4: return driver_->memset_d32(dst, value, count, s) == CUDA_SUCCESS;
    default: return false;
  }
}

bool CudaIssuer::copy_dtod(uint64_t stream, uint64_t dst, uint64_t src, uint64_t nbytes) {
  if (!current()) return false;
  return driver_->copy_dtod(dst, src, nbytes, reinterpret_cast<CUstream>(stream)) == CUDA_SUCCESS;
}

bool CudaIssuer::copy_htod(uint64_t stream, uint64_t dst, const uint8_t* src, uint64_t nbytes) {
  if (!current()) return false;
  // From memory the driver has not registered: it stages the bytes before it
  // returns, so the ring or arena slot may be reused at once.
  return driver_->copy_htod(dst, src, nbytes, reinterpret_cast<CUstream>(stream)) == CUDA_SUCCESS;
}

bool CudaIssuer::launch_graph(uint64_t stream, const GraphEntry& graph, uint32_t sm_cap) {
  if (sm_cap != 0 || graph.native == 0 || !current()) return false;
  return driver_->graph_launch(reinterpret_cast<CUgraphExec>(graph.native), reinterpret_cast<CUstream>(stream)) ==
         CUDA_SUCCESS;
}

bool CudaIssuer::stream_quiet(uint64_t stream) {
  if (!current()) return false;
  return driver_->stream_query(reinterpret_cast<CUstream>(stream)) == CUDA_SUCCESS;
}

}  // namespace tally::data_plane
