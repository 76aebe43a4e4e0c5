// User objects (cuUserObjectCreate): a pointer and a destructor with a reference
// count, which the job and its graphs hold. A graph's references go when the graph
// is destroyed; an instantiated graph holds its own copies of its graph's (and
// child graphs') references until it is destroyed or updated, and lets go of them
// only once the work it launched is done. The destructor runs when the last
// reference goes, on the client's destructor thread (never the caller's, never
// under a lock of the client: it may call the driver).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "driver_headers.h"
#include "driver_objects.h"

namespace tally::client {

constexpr ObjectTag kUserObjectTag = static_cast<ObjectTag>(0x5553524f);  // "USRO"

struct UserObject {
  std::atomic<ObjectTag> tag{kUserObjectTag};
  void* ptr = nullptr;
  CUhostFn destroy = nullptr;
  std::atomic<uint64_t> refs{0};
};

inline UserObject* as_user_object(CUuserObject o) { return live_object<UserObject, kUserObjectTag>(o); }

// Adds `count` references (the object must be alive).
void retain_user_object(UserObject* object, uint64_t count);
// Drops `count` references; the last one queues the destructor. False (nothing
// changes) when fewer are held.
bool release_user_object(UserObject* object, uint64_t count);

// The references one graph or one instantiated graph holds: object -> count.
class UserObjectRefs {
 public:
  // Takes `count` references the caller already holds.
  void adopt(UserObject* object, uint64_t count);
  // Gives back `count` of the references held on `object`; false (nothing changes)
  // when fewer are held.
  bool release(UserObject* object, uint64_t count);
  // Adds a new reference of its own for each reference `other` holds (a clone, an
  // instantiation: both hold them independently).
  void retain_copy_of(const UserObjectRefs& other);
  // Drops every reference held.
  void release_all();
  bool empty() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<UserObject*, uint64_t> counts_;
};

// Drops the references in `refs` once the job's work queued so far is done (what
// an instantiated graph holds: its launches may still run). On the destructor thread.
void release_after_queued_work(std::shared_ptr<UserObjectRefs> refs);

// Runs `done` once the job's work queued so far is done, on the destructor thread
// (what else an instantiated graph holds: its graph memory).
void after_queued_work(std::function<void()> done);

}  // namespace tally::client
