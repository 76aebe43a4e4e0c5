#include "emulator/worker_pool.h"

#include <algorithm>
#include <thread>

namespace tally::emu {

// More threads than this are never made; tasks then wait for one (the launch's own
// thread takes their blocks meanwhile, so no launch waits on them).
constexpr uint32_t kMaxThreads = 256;

struct WorkerPool::Batch {
  const std::function<void(uint32_t)>* work;
  std::mutex mutex;
  std::condition_variable done;
  uint32_t running = 0;
};

WorkerPool& WorkerPool::instance() {
  // Never destroyed: pooled threads may still wait on it while the process exits.
  static WorkerPool* pool = new WorkerPool();
  return *pool;
}

void WorkerPool::run(uint32_t n, const std::function<void(uint32_t)>& work) {
  if (n <= 1) {
    work(0);
    return;
  }
  auto batch = std::make_shared<Batch>();
  batch->work = &work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (uint32_t i = 1; i < n; ++i) queue_.push_back(Task{batch, i});
    while (idle_ < queue_.size() && threads_ < kMaxThreads) {
      ++threads_;
      ++idle_;
      std::thread([this] { serve(); }).detach();
    }
  }
  ready_.notify_all();
  work(0);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.erase(std::remove_if(queue_.begin(), queue_.end(), [&](const Task& t) { return t.batch == batch; }),
                 queue_.end());
  }
  std::unique_lock<std::mutex> lock(batch->mutex);
  batch->done.wait(lock, [&] { return batch->running == 0; });
}

void WorkerPool::serve() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return !queue_.empty(); });
      task = std::move(queue_.front());
      queue_.pop_front();
      --idle_;
      // Counted as running before the pool's lock is let go: the launch removes the
      // tasks still queued under that lock, then waits for the running ones.
      std::lock_guard<std::mutex> batch_lock(task.batch->mutex);
      ++task.batch->running;
    }
    (*task.batch->work)(task.index);
    {
      std::lock_guard<std::mutex> batch_lock(task.batch->mutex);
      --task.batch->running;
    }
    task.batch->done.notify_all();
    task.batch.reset();
    std::lock_guard<std::mutex> lock(mutex_);
    ++idle_;
  }
}

}  // namespace tally::emu
