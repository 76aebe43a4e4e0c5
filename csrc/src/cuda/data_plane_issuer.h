// The cuda backend's DeviceIssuer (data_plane_issuer.cpp): driver calls on the
// server's context, through the libcuda.so.1 the process already loaded.
#pragma once
#include <atomic>
#include <memory>

#include "data_plane/device_issue.h"

namespace tally::data_plane {

class CudaIssuer final : public DeviceIssuer {
 public:
  // `context`: the CUcontext the Python backend uses, as an integer.
  explicit CudaIssuer(uint64_t context);
  // The backend made its context again after a fault (tally/backends/cuda_context.py).
  void set_context(uint64_t context) { context_.store(context, std::memory_order_release); }
  ~CudaIssuer() override;
  CudaIssuer(const CudaIssuer&) = delete;
  CudaIssuer& operator=(const CudaIssuer&) = delete;

  bool launch(uint64_t stream, const FunctionEntry& fn, const LaunchShape& shape, const uint8_t* params,
              uint32_t param_bytes, uint32_t sm_cap) override;
  bool memset(uint64_t stream, uint64_t dst, uint32_t value, uint32_t element_size, uint64_t count) override;
  bool copy_dtod(uint64_t stream, uint64_t dst, uint64_t src, uint64_t nbytes) override;
  bool copy_htod(uint64_t stream, uint64_t dst, const uint8_t* src, uint64_t nbytes) override;
  // cuGraphLaunch of the backend's CUgraphExec; a capped replay stays Python's (it
  // runs node by node on the share's stream: tally/backends/cuda_graphs.py).
  bool launch_graph(uint64_t stream, const GraphEntry& graph, uint32_t sm_cap) override;
  bool stream_quiet(uint64_t stream) override;
  bool completes_at_issue() const override { return false; }
  // A capped launch goes to a green-context partition's stream, which the Python
  // backend keeps (tally/backends/green_partitions.py): capped lanes stay Python's.
  bool carries_sm_cap() const override { return false; }
  const char* name() const override { return "cuda"; }

 private:
  struct Driver;
  bool current();

  std::atomic<uint64_t> context_;
  void* library_ = nullptr;
  std::unique_ptr<Driver> driver_;
};

}  // namespace tally::data_plane
