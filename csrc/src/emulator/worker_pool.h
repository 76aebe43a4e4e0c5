// The threads a launch's blocks run on: the emulator's SMs.
//
// A launch asks for n workers: the calling thread (its stream's) is worker 0 and
// n - 1 tasks go to pooled threads. Workers take blocks from the launch's shared
// counter, as an SM takes the next block from the block scheduler, so a worker
// that starts late (the pool busy with other launches) finds fewer blocks, or
// none. Threads are made on demand and kept, so a launch does not pay for
// creating them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace tally::emu {

class WorkerPool {
 public:
  static WorkerPool& instance();

  // Runs work(0) on the caller and work(i), 1 <= i < n, on pooled threads; returns
  // once work(0) returned and every work(i) that started has returned. A work(i)
  // that had not started by then never runs (its worker would find no block left).
  void run(uint32_t n, const std::function<void(uint32_t)>& work);

 private:
  struct Batch;
  struct Task {
    std::shared_ptr<Batch> batch;
    uint32_t index;
  };

  void serve();

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Task> queue_;
  uint32_t threads_ = 0;
  uint32_t idle_ = 0;
};

}  // namespace tally::emu
