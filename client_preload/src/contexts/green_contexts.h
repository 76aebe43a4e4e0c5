// Green contexts: a job's own partitions of the SMs it may use. The job asks for
// the device's SM resource (sm_resources.cpp: the SMs of its tally share, else the
// whole device, and the partition rules, from the server), splits it, describes a
// group and creates a green context on it. A green context's streams are streams of
// the job on the server that carry an SM cap: every kernel launched on them runs on
// at most the context's SMs, and never on more than the job's share. While a green
// context is current, the NULL stream is the green context's default stream.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "driver_headers.h"
#include "driver_objects.h"

namespace tally::client {

struct ContextObject;

struct GreenContextObject {
  std::atomic<ObjectTag> tag{ObjectTag::kGreenContext};
  uint64_t id = 0;                 // cuGreenCtxGetId
  CUdevice device = 0;
  unsigned sm_count = 0;           // the SMs its kernels may use
  unsigned min_partition = 0;      // the rules of the resource it was made from
  unsigned alignment = 0;
  ContextObject* context = nullptr;        // what cuCtxFromGreenCtx returns
  StreamObject* default_stream = nullptr;  // the NULL stream while it is current

  std::mutex mutex;
  std::vector<StreamObject*> streams;      // made in it, default first (cuGreenCtxRecordEvent / WaitEvent)
  std::unordered_map<StreamObject*, CUevent> fences;  // per stream, for cuGreenCtxRecordEvent
  CUstream join = nullptr;                 // where cuGreenCtxRecordEvent gathers its streams' work
};

// The green context the calling thread's current context stands for; nullptr: none.
GreenContextObject* current_green_context();

// A stream made in `green` (after the server heard of it).
void note_green_stream(GreenContextObject* green, StreamObject* stream);

// What a CUdevResourceDesc points at.
struct ResourceDescObject {
  std::atomic<ObjectTag> tag{ObjectTag::kResourceDesc};
  CUdevice device = 0;
  unsigned sm_count = 0;
  unsigned min_partition = 0;
  unsigned alignment = 0;
};

inline ResourceDescObject* as_resource_desc(CUdevResourceDesc d) {
  return live_object<ResourceDescObject, ObjectTag::kResourceDesc>(d);
}

// Fills `out` with an SM resource of `sm_count` SMs that the split and describe
// calls accept (a whole resource: not the output of a split).
void fill_sm_resource(CUdevResource* out, CUdevice device, unsigned sm_count, unsigned min_partition,
                      unsigned alignment);

}  // namespace tally::client
