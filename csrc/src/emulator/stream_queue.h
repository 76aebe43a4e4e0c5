// An emulator stream's queue of work (tally/backends/emulator/streams.py runs
// it on the stream's thread). Python queues callables; the C++ data plane
// (csrc/src/emulator/data_plane_issuer.cpp) queues NativeOps (a launch, a memset,
// a copy) without the GIL. Both go into one FIFO, so stream order holds whoever
// queued the work. The stream's thread runs a NativeOp (GIL released) and then
// does what Python does after every launch (statistics, printf, errors).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "emulator/exec.h"
#include "emulator/memory.h"
#include "emulator/program.h"

namespace tally::emu {

// Ends running launches when set (the backend's close()).
struct CancelFlag {
  std::atomic<bool> value{false};
};

struct NativeOp {
  enum class Kind { kLaunch, kMemset, kCopyHtoD, kCopyDtoD };
  Kind kind = Kind::kLaunch;
  std::shared_ptr<DeviceMemory> memory;
  // kLaunch
  std::shared_ptr<Program> program;
  std::string params;
  LaunchConfig config;
  std::shared_ptr<CancelFlag> cancel;
  // memory operations
  uint64_t dst = 0, src = 0, count = 0;
  uint32_t value = 0, element_size = 0;
  std::string bytes;   // kCopyHtoD: the bytes to write

  // Runs it to the end; a launch's fault is in the result, a memory operation's
  // is thrown (MemoryError), as from the Python API.
  LaunchResult run();
};

class StreamQueue {
 public:
  // One entry: a Python callable (an owned reference), a NativeOp, or the stop mark.
  struct Item {
    void* python = nullptr;   // PyObject*, owned
    std::shared_ptr<NativeOp> native;
    bool stop = false;
  };

  StreamQueue() = default;
  ~StreamQueue();   // with the GIL held (Python owns the queue)
  StreamQueue(const StreamQueue&) = delete;
  StreamQueue& operator=(const StreamQueue&) = delete;

  void push(Item item);
  // Waits for the next item (the caller has released the GIL).
  Item pop();
  // The stream's thread finished an item.
  void done();

  bool idle();
  bool wait_idle(double timeout_seconds);   // false on timeout; < 0: forever
  // Nothing queued or running, and no error or printf output the job has not been given.
  bool quiet();
  void set_unread(bool unread) { unread_.store(unread, std::memory_order_release); }

 private:
  std::mutex mu_;
  std::condition_variable ready_;
  std::condition_variable drained_;
  std::deque<Item> items_;
  uint64_t pending_ = 0;   // pushed and not done (stop marks excluded)
  std::atomic<bool> unread_{false};
};

}  // namespace tally::emu
