// How the data plane hands work to the device: one DeviceIssuer per backend
// (null: nothing to do; cuda: the driver; emulator: its C++ stream queues).
//
// Every call either issues the operation on `stream` (the backend's own stream
// handle, as the executor created it) and returns true, or issues nothing and
// returns false: the request then goes to the Python handlers, which issue it
// the slow way or report why it failed (a launch the driver refuses, memory the
// emulator has not mapped...). So an issuer never reports errors itself.
#pragma once
#include <cstdint>
#include <memory>

namespace tally::data_plane {

// What the data plane knows of a kernel the job resolved (registered by Python
// after the kernel's first launch went through the handlers).
struct FunctionEntry {
  uint32_t param_bytes = 0;          // the launch's parameter block must be exactly this long
  uint64_t native = 0;               // the backend's handle (a CUfunction)
  std::shared_ptr<void> object;      // or the backend's object (the emulator's lowered program)
  // Launch limits the backend checks before it queues a launch; 0: none.
  uint32_t max_threads = 0;          // .maxntid
  uint32_t required_block[3] = {0, 0, 0};   // .reqntid
  uint32_t static_shared_bytes = 0;
  uint32_t required_cluster[3] = {0, 0, 0};   // .reqnctapercluster (0: none)
  bool explicit_cluster = false;              // .explicitcluster: a launch must name a cluster
};

// A job's CUDA graph as the backend runs it whole (registered by Python after a
// replay of it went through the handlers as one unit).
struct GraphEntry {
  uint64_t native = 0;               // the backend's executable (a CUgraphExec)
  uint32_t kernels = 0;              // its kernel nodes, for the counters
};

struct LaunchShape {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared_bytes;
  uint32_t cluster[3];   // the thread-block cluster the launch asked for ({0, 0, 0}: none)
};

class DeviceIssuer {
 public:
  virtual ~DeviceIssuer() = default;
  // `sm_cap`: at most this many SMs run the kernel's blocks (0: the whole device);
  // only issuers that carry_sm_cap() are handed one.
  virtual bool launch(uint64_t stream, const FunctionEntry& fn, const LaunchShape& shape, const uint8_t* params,
                      uint32_t param_bytes, uint32_t sm_cap) = 0;
  virtual bool memset(uint64_t stream, uint64_t dst, uint32_t value, uint32_t element_size, uint64_t count) = 0;
  virtual bool copy_dtod(uint64_t stream, uint64_t dst, uint64_t src, uint64_t nbytes) = 0;
  // `src` is valid only during the call (the ring or arena slot is reused afterwards).
  virtual bool copy_htod(uint64_t stream, uint64_t dst, const uint8_t* src, uint64_t nbytes) = 0;
  // One replay of a graph as one unit; `sm_cap` as for launch(). Issuers without a
  // graph object of their own decline.
  virtual bool launch_graph(uint64_t stream, const GraphEntry& graph, uint32_t sm_cap) {
    (void)stream, (void)graph, (void)sm_cap;
    return false;
  }
  // The stream has finished everything issued to it and holds no error or device
  // output for the job; false when it is busy or in doubt (Python then looks).
  virtual bool stream_quiet(uint64_t stream) = 0;
  // Work is complete the moment it is issued (null): no completion to watch.
  virtual bool completes_at_issue() const = 0;
  // It confines a launch to an SM cap as the Python backend does (or, like the null
  // device, does what the Python backend does with one: nothing).
  virtual bool carries_sm_cap() const = 0;
  virtual const char* name() const = 0;
};

// The null device: accepts everything, executes nothing (tally/backends/null.py).
class NullIssuer final : public DeviceIssuer {
 public:
  bool launch(uint64_t, const FunctionEntry&, const LaunchShape&, const uint8_t*, uint32_t, uint32_t) override {
    return true;
  }
  bool memset(uint64_t, uint64_t, uint32_t, uint32_t, uint64_t) override { return true; }
  bool copy_dtod(uint64_t, uint64_t, uint64_t, uint64_t) override { return true; }
  bool copy_htod(uint64_t, uint64_t, const uint8_t*, uint64_t) override { return true; }
  bool launch_graph(uint64_t, const GraphEntry&, uint32_t) override { return true; }
  bool stream_quiet(uint64_t) override { return true; }
  bool completes_at_issue() const override { return true; }
  bool carries_sm_cap() const override { return true; }   // the null backend accepts a cap and ignores it
  const char* name() const override { return "null"; }
};

}  // namespace tally::data_plane
