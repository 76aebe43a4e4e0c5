// User objects (user_objects.h) and their entry points: cuUserObjectCreate,
// cuUserObjectRetain/Release, cuGraphRetainUserObject/ReleaseUserObject.
#include "graphs/user_objects.h"

#include <unistd.h>

#include <climits>
#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>

#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "graphs/graph_objects.h"

namespace tally::client {
namespace {

// One thread runs the destructors and the deferred releases, in the order they
// were queued, so none runs on a thread that holds a lock of the client (or of the
// job: cuUserObjectRelease may be called under the job's own locks).
class DestructorThread {
 public:
  static DestructorThread& instance() {
    static auto* thread = new DestructorThread();  // never destroyed: exit handlers may still release
    return *thread;
  }

  void queue(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
    // A fork()ed child has this object but not the thread: it starts its own.
    if (owner_pid_ != getpid()) {
      owner_pid_ = getpid();
      std::thread([this] { run(); }).detach();
    }
    ready_.notify_one();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return !tasks_.empty(); });
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  pid_t owner_pid_ = 0;
};

bool valid_count(unsigned count) { return count != 0 && count <= INT_MAX; }

}  // namespace

void retain_user_object(UserObject* object, uint64_t count) { object->refs.fetch_add(count); }

bool release_user_object(UserObject* object, uint64_t count) {
  uint64_t held = object->refs.load();
  do {
    if (held < count) return false;
  } while (!object->refs.compare_exchange_weak(held, held - count));
  if (held == count) {
    object->tag.store(ObjectTag::kDead, std::memory_order_release);
    DestructorThread::instance().queue([object] { object->destroy(object->ptr); });
  }
  return true;
}

void UserObjectRefs::adopt(UserObject* object, uint64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  counts_[object] += count;
}

bool UserObjectRefs::release(UserObject* object, uint64_t count) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = counts_.find(object);
    if (it == counts_.end() || it->second < count) return false;
    if ((it->second -= count) == 0) counts_.erase(it);
  }
  release_user_object(object, count);
  return true;
}

void UserObjectRefs::retain_copy_of(const UserObjectRefs& other) {
  std::unordered_map<UserObject*, uint64_t> copied;
  {
    std::lock_guard<std::mutex> lock(other.mutex_);
    copied = other.counts_;
  }
  for (const auto& [object, count] : copied) {
    retain_user_object(object, count);
    adopt(object, count);
  }
}

void UserObjectRefs::release_all() {
  std::unordered_map<UserObject*, uint64_t> held;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    held.swap(counts_);
  }
  for (const auto& [object, count] : held) release_user_object(object, count);
}

bool UserObjectRefs::empty() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_.empty();
}

void release_after_queued_work(std::shared_ptr<UserObjectRefs> refs) {
  if (refs == nullptr || refs->empty()) return;
  after_queued_work([refs] { refs->release_all(); });
}

void after_queued_work(std::function<void()> done) {
  DestructorThread::instance().queue([done = std::move(done)] {
    Connection& c = Connection::instance();
    // A job whose connection failed has no work left running: release at once.
    if (c.usable() == CUDA_SUCCESS) (void)c.request_done(protocol::CtxSynchronizeMsg{});
    done();
  });
}

}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuUserObjectCreate_v11030)(CUuserObject* object_out, void* ptr, CUhostFn destroy,
                                       unsigned int initialRefcount, unsigned int flags) {
  // The driver requires NO_DESTRUCTOR_SYNC, its only flag.
  if (object_out == nullptr || destroy == nullptr || !valid_count(initialRefcount) ||
      flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  auto* object = new UserObject();
  object->ptr = ptr;
  object->destroy = destroy;
  object->refs.store(initialRefcount);
  *object_out = reinterpret_cast<CUuserObject>(object);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuUserObjectRetain_v11030)(CUuserObject object, unsigned int count) {
  UserObject* o = as_user_object(object);
  if (o == nullptr || !valid_count(count)) return CUDA_ERROR_INVALID_VALUE;
  retain_user_object(o, count);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuUserObjectRelease_v11030)(CUuserObject object, unsigned int count) {
  UserObject* o = as_user_object(object);
  if (o == nullptr || !valid_count(count)) return CUDA_ERROR_INVALID_VALUE;
  // Releasing references the caller does not hold is undefined in CUDA; refusing
  // it here keeps the count from wrapping.
  return release_user_object(o, count) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TALLY_ENTRY(cuGraphRetainUserObject_v11030)(CUgraph graph, CUuserObject object, unsigned int count,
                                            unsigned int flags) {
  GraphObject* g = as_graph(graph);
  UserObject* o = as_user_object(object);
  if (g == nullptr || o == nullptr || !valid_count(count) || (flags & ~CU_GRAPH_USER_OBJECT_MOVE) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  // MOVE hands the graph references the caller holds; otherwise the graph gets new ones.
  if ((flags & CU_GRAPH_USER_OBJECT_MOVE) == 0) retain_user_object(o, count);
  g->user_objects->adopt(o, count);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGraphReleaseUserObject_v11030)(CUgraph graph, CUuserObject object, unsigned int count) {
  GraphObject* g = as_graph(graph);
  UserObject* o = as_user_object(object);
  if (g == nullptr || o == nullptr || !valid_count(count)) return CUDA_ERROR_INVALID_VALUE;
  return g->user_objects->release(o, count) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
