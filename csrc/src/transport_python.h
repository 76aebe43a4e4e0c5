// Python-side handles for the transport, shared by transport_bindings.cpp (the
// public API) and transport_bench.cpp (C++ loops the benchmarks drive).
//
// A Python Segment owns a shared_ptr to the C++ Segment. Every call copies that
// pointer before it releases the GIL, and memoryviews into an arena hold one too,
// so Segment.close() from another thread, or a view that outlives the segment,
// never leaves anyone touching unmapped memory: the mapping goes away with the
// last user.
#pragma once
#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <string>

#include "tally/segment.h"

namespace tally::transport::python {

namespace py = pybind11;

enum class Part { kRequest = 0, kCompletion = 1, kUpload = 2, kDownload = 3 };

struct SegmentHandle {
  std::shared_ptr<Segment> segment;
  std::string name;
  Side side;
  // One flag per part: set while a call on this process's end of the part runs.
  // Each end is single-threaded by design (SPSC); a second concurrent caller gets
  // an error instead of silently corrupting the ring.
  std::atomic<bool> busy[4] = {false, false, false, false};

  std::shared_ptr<Segment> get() const {
    std::shared_ptr<Segment> s = segment;
    if (!s) throw TransportError("segment " + name + " is closed in this process");
    return s;
  }
};

struct PartRef {
  std::shared_ptr<SegmentHandle> handle;
  Part part;
};
struct PyRing : PartRef {};
struct PyArena : PartRef {};

inline RecordRing& ring_of(Segment& s, Part part) {
  return part == Part::kRequest ? s.request_ring() : s.completion_ring();
}
inline ByteArena& arena_of(Segment& s, Part part) { return part == Part::kUpload ? s.upload() : s.download(); }

// Holds the part's busy flag for the duration of one call.
class BusyGuard {
 public:
  BusyGuard(SegmentHandle& h, Part part, const std::string& what) : flag_(h.busy[static_cast<int>(part)]) {
    if (flag_.exchange(true, std::memory_order_acquire))
      throw TransportError(what + " is already in use by another thread of this process; each end of a ring or arena "
                                  "must be used by one thread at a time");
  }
  ~BusyGuard() { flag_.store(false, std::memory_order_release); }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  std::atomic<bool>& flag_;
};

// A C-contiguous bytes-like argument (bytes, bytearray, memoryview, numpy...),
// held for the duration of a call. Destroy it with the GIL held.
class ContiguousBytes {
 public:
  explicit ContiguousBytes(const py::handle& obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_SIMPLE) != 0) throw py::error_already_set();
  }
  ~ContiguousBytes() { PyBuffer_Release(&view_); }
  ContiguousBytes(const ContiguousBytes&) = delete;
  ContiguousBytes& operator=(const ContiguousBytes&) = delete;
  const void* data() const { return view_.buf; }
  uint64_t size() const { return static_cast<uint64_t>(view_.len); }

 private:
  Py_buffer view_;
};

// None waits forever; 0 tries once without waiting.
inline Deadline deadline_from(const py::object& timeout) {
  if (timeout.is_none()) return Deadline::never();
  const double seconds = timeout.cast<double>();
  if (seconds < 0) throw py::value_error("timeout must be None or >= 0 seconds, got " + std::to_string(seconds));
  return Deadline::after_seconds(seconds);
}

}  // namespace tally::transport::python
