// tally._core's transport API: Segment, Ring, Arena and the transport exceptions.
// Blocking calls try once with the GIL held (the common, fast case) and release
// the GIL only when they have to wait.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "module_registry.h"
#include "transport_python.h"

namespace tally::transport::python {
namespace {

constexpr double kDefaultSpinUs = 20.0;
constexpr double kDefaultPeerCheckMs = 50.0;

WaitPolicy make_policy(double spin_us, double peer_check_ms) {
  if (!(spin_us >= 0) || !(peer_check_ms > 0))
    throw py::value_error("spin_us must be >= 0 and peer_check_ms > 0");
  WaitPolicy p;
  // Any spin over a day means "poll" (tally-server --hp-spin-us inf); kept finite so
  // that deadlines computed from it cannot overflow.
  constexpr double kMaxSpinUs = 86400e6;
  p.spin_ns = static_cast<int64_t>(std::min(spin_us, kMaxSpinUs) * 1e3);
  p.peer_check_ns = static_cast<int64_t>(peer_check_ms * 1e6);
  return p;
}

std::string seconds_text(const py::object& timeout) {
  return timeout.is_none() ? std::string("forever") : std::to_string(timeout.cast<double>()) + " s";
}

[[noreturn]] void raise_peer_dead(Segment& s, const std::string& what) {
  throw PeerDead(what + " of segment " + s.name() + ": the " + (s.side() == Side::kServer ? "client" : "server") +
                 " exited or closed its side");
}

// ---- Segment -------------------------------------------------------------------

std::shared_ptr<SegmentHandle> wrap(std::unique_ptr<Segment> s) {
  auto h = std::make_shared<SegmentHandle>();
  h->name = s->name();
  h->side = s->side();
  h->segment = std::move(s);
  return h;
}

std::shared_ptr<SegmentHandle> segment_create(const std::string& name, uint64_t request_bytes, uint64_t completion_bytes,
                                              uint64_t upload_bytes, uint64_t download_bytes, double spin_us,
                                              double peer_check_ms) {
  SegmentSizes sizes{request_bytes, completion_bytes, upload_bytes, download_bytes};
  const WaitPolicy policy = make_policy(spin_us, peer_check_ms);
  std::unique_ptr<Segment> s;
  {
    py::gil_scoped_release nogil;  // committing the pages takes a while for big arenas
    s = Segment::create(name, sizes, policy);
  }
  return wrap(std::move(s));
}

std::shared_ptr<SegmentHandle> segment_open(const std::string& name, double spin_us, double peer_check_ms) {
  const WaitPolicy policy = make_policy(spin_us, peer_check_ms);
  std::unique_ptr<Segment> s;
  {
    py::gil_scoped_release nogil;
    s = Segment::open(name, policy);
  }
  return wrap(std::move(s));
}

std::shared_ptr<SegmentHandle> segment_adopt(int fd, const std::string& name, double spin_us, double peer_check_ms) {
  const WaitPolicy policy = make_policy(spin_us, peer_check_ms);
  std::unique_ptr<Segment> s;
  {
    py::gil_scoped_release nogil;
    s = Segment::adopt(fd, name, policy);
  }
  return wrap(std::move(s));
}

std::string segment_repr(const SegmentHandle& h) {
  std::ostringstream out;
  out << "<tally._core.Segment " << h.name << " " << side_name(h.side);
  if (auto s = h.segment) {
    out << " " << s->size() << " bytes>";
  } else {
    out << " closed>";
  }
  return out.str();
}

// ---- Ring ----------------------------------------------------------------------

std::string ring_label(const PyRing& r) { return r.part == Part::kRequest ? "request ring" : "completion ring"; }

void ring_push(const PyRing& r, uint32_t kind, uint64_t tag, const py::buffer& payload, const py::object& timeout) {
  auto s = r.handle->get();
  RecordRing& ring = ring_of(*s, r.part);
  BusyGuard busy(*r.handle, r.part, ring_label(r));
  const ContiguousBytes data(payload);
  if (ring.try_push(kind, tag, data.data(), data.size())) return;
  const Deadline deadline = deadline_from(timeout);
  WaitStatus st;
  {
    py::gil_scoped_release nogil;
    st = ring.push(kind, tag, data.data(), data.size(), deadline);
  }
  if (st == WaitStatus::kTimedOut)
    throw RingFull(ring.name() + " of segment " + s->name() + " stayed full for " + seconds_text(timeout) + " (" +
                   std::to_string(ring.used()) + " of " + std::to_string(ring.capacity()) +
                   " bytes in use); the consumer is not draining it");
  if (st == WaitStatus::kPeerGone) raise_peer_dead(*s, "push to the " + ring.name());
}

bool ring_try_push(const PyRing& r, uint32_t kind, uint64_t tag, const py::buffer& payload) {
  auto s = r.handle->get();
  BusyGuard busy(*r.handle, r.part, ring_label(r));
  const ContiguousBytes data(payload);
  return ring_of(*s, r.part).try_push(kind, tag, data.data(), data.size());
}

py::tuple take_record(RecordRing& ring, const RecordView& v) {
  py::tuple t = py::make_tuple(v.kind, v.tag, py::bytes(reinterpret_cast<const char*>(v.payload), v.size));
  ring.consume(v);
  return t;
}

// Waits for the first record; false on timeout.
bool wait_first(Segment& s, RecordRing& ring, const py::object& timeout, RecordView* v) {
  if (ring.try_peek(v)) return true;
  const Deadline deadline = deadline_from(timeout);
  WaitStatus st;
  {
    py::gil_scoped_release nogil;
    st = ring.peek(v, deadline);
  }
  if (st == WaitStatus::kPeerGone) raise_peer_dead(s, "pop from the " + ring.name());
  return st == WaitStatus::kReady;
}

py::object ring_pop(const PyRing& r, const py::object& timeout) {
  auto s = r.handle->get();
  RecordRing& ring = ring_of(*s, r.part);
  BusyGuard busy(*r.handle, r.part, ring_label(r));
  RecordView v;
  if (!wait_first(*s, ring, timeout, &v)) return py::none();
  return take_record(ring, v);
}

bool ring_wait_record(const PyRing& r, const py::object& timeout) {
  auto s = r.handle->get();
  RecordRing& ring = ring_of(*s, r.part);
  BusyGuard busy(*r.handle, r.part, ring_label(r));
  RecordView v;
  return wait_first(*s, ring, timeout, &v);
}

py::list ring_pop_batch(const PyRing& r, size_t max_records, const py::object& timeout) {
  if (max_records == 0) throw py::value_error("max_records must be >= 1");
  auto s = r.handle->get();
  RecordRing& ring = ring_of(*s, r.part);
  BusyGuard busy(*r.handle, r.part, ring_label(r));
  py::list out;
  RecordView v;
  if (!wait_first(*s, ring, timeout, &v)) return out;
  out.append(take_record(ring, v));
  while (out.size() < max_records && ring.try_peek(&v)) out.append(take_record(ring, v));
  return out;
}

// ---- Arena ---------------------------------------------------------------------

std::string arena_label(const PyArena& a) { return a.part == Part::kUpload ? "upload arena" : "download arena"; }

// Exposes arena bytes to Python's buffer protocol and keeps the mapping alive.
struct ArenaBytes {
  std::shared_ptr<Segment> segment;
  uint8_t* data;
  uint64_t size;
};

void check_span(const ByteArena& arena, uint64_t offset, uint64_t nbytes) {
  if (!arena.contains(offset, nbytes))
    throw py::value_error(arena.name() + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset) + "+" +
                          std::to_string(nbytes) + ") lie outside the arena (capacity " +
                          std::to_string(arena.capacity()) + ")");
}

uint64_t arena_reserve(const PyArena& a, uint64_t nbytes, const py::object& timeout) {
  auto s = a.handle->get();
  ByteArena& arena = arena_of(*s, a.part);
  BusyGuard busy(*a.handle, a.part, arena_label(a));
  uint64_t offset = 0;
  if (arena.try_reserve(nbytes, &offset)) return offset;
  const Deadline deadline = deadline_from(timeout);
  WaitStatus st;
  {
    py::gil_scoped_release nogil;
    st = arena.reserve(nbytes, deadline, &offset);
  }
  if (st == WaitStatus::kTimedOut)
    throw RingFull(arena.name() + " of segment " + s->name() + " had no room for " + std::to_string(nbytes) +
                   " bytes for " + seconds_text(timeout) + " (" + std::to_string(arena.used()) + " of " +
                   std::to_string(arena.capacity()) + " bytes in use); the consumer is not releasing chunks");
  if (st == WaitStatus::kPeerGone) raise_peer_dead(*s, "reserve in the " + arena.name());
  return offset;
}

void arena_write(const PyArena& a, uint64_t offset, const py::buffer& data) {
  auto s = a.handle->get();
  ByteArena& arena = arena_of(*s, a.part);
  const ContiguousBytes bytes(data);
  check_span(arena, offset, bytes.size());
  std::memcpy(arena.data() + offset, bytes.data(), bytes.size());
}

py::bytes arena_read(const PyArena& a, uint64_t offset, uint64_t nbytes) {
  auto s = a.handle->get();
  ByteArena& arena = arena_of(*s, a.part);
  check_span(arena, offset, nbytes);
  return py::bytes(reinterpret_cast<const char*>(arena.data() + offset), nbytes);
}

py::memoryview arena_view(const PyArena& a, uint64_t offset, uint64_t nbytes) {
  auto s = a.handle->get();
  ByteArena& arena = arena_of(*s, a.part);
  check_span(arena, offset, nbytes);
  py::object owner = py::cast(ArenaBytes{s, arena.data() + offset, nbytes});
  return py::memoryview(owner);
}

void arena_release(const PyArena& a, uint64_t offset, uint64_t nbytes) {
  auto s = a.handle->get();
  BusyGuard busy(*a.handle, a.part, arena_label(a));
  arena_of(*s, a.part).release(offset, nbytes);
}

void bind_exceptions(py::module_& m) {
  auto& base = py::register_local_exception<TransportError>(m, "TransportError", PyExc_RuntimeError);
  py::register_local_exception<RingFull>(m, "RingFull", py::make_tuple(base, py::handle(PyExc_TimeoutError)));
  py::register_local_exception<RecordTooLarge>(m, "RecordTooLarge", py::make_tuple(base, py::handle(PyExc_ValueError)));
  py::register_local_exception<PeerDead>(m, "PeerDead", py::make_tuple(base, py::handle(PyExc_ConnectionError)));
  py::register_local_exception<CorruptSegment>(m, "CorruptSegment", base);
  py::register_local_exception<ProtocolVersionMismatch>(m, "ProtocolVersionMismatch", base);
}

void bind_transport(py::module_& m) {
  bind_exceptions(m);

  py::class_<ArenaBytes>(m, "_ArenaBytes", py::buffer_protocol())
      .def_buffer([](ArenaBytes& b) {
        return py::buffer_info(b.data, 1, py::format_descriptor<uint8_t>::format(), 1, {static_cast<py::ssize_t>(b.size)},
                               {static_cast<py::ssize_t>(1)}, /*readonly=*/false);
      });

  py::class_<PyRing>(m, "Ring",
                     "One direction of a segment: an SPSC ring of (kind, tag, payload) records. Only the producing "
                     "side may push and only the consuming side may pop.")
      .def("push", &ring_push, py::arg("kind"), py::arg("tag"), py::arg("payload") = py::bytes(""),
           py::arg("timeout") = py::none(),
           "Appends a record; blocks while the ring is full (RingFull after `timeout` seconds, PeerDead if the "
           "consumer is gone). RecordTooLarge if it can never fit.")
      .def("try_push", &ring_try_push, py::arg("kind"), py::arg("tag"), py::arg("payload") = py::bytes(""),
           "Appends a record if there is room now; returns whether it did.")
      .def("pop", &ring_pop, py::arg("timeout") = py::none(),
           "Removes the oldest record as (kind, tag, payload); None after `timeout` seconds; PeerDead when empty "
           "and the producer is gone.")
      .def("wait_record", &ring_wait_record, py::arg("timeout") = py::none(),
           "Consumer: waits like pop() until a record is there, without taking it; False after `timeout` "
           "seconds, PeerDead when empty and the producer is gone.")
      .def("pop_batch", &ring_pop_batch, py::arg("max_records"), py::arg("timeout") = py::none(),
           "Waits like pop() for the first record, then takes up to max_records that are already there.")
      .def_property_readonly("capacity", [](const PyRing& r) { return ring_of(*r.handle->get(), r.part).capacity(); })
      .def_property_readonly("used", [](const PyRing& r) { return ring_of(*r.handle->get(), r.part).used(); })
      .def_property_readonly("max_payload", [](const PyRing& r) { return ring_of(*r.handle->get(), r.part).max_payload(); })
      .def_property_readonly("name", [](const PyRing& r) { return ring_label(r); })
      .def_property_readonly("is_producer", [](const PyRing& r) {
        return ring_of(*r.handle->get(), r.part).role() == RingRole::kProducer;
      })
      .def("__repr__", [](const PyRing& r) { return "<tally._core.Ring " + ring_label(r) + " of " + r.handle->name + ">"; });

  py::class_<PyArena>(m, "Arena",
                      "Bulk bytes beside a ring: the producer reserves a contiguous chunk, writes it and names "
                      "(offset, length) in a record; the consumer releases chunks in order.")
      .def("reserve", &arena_reserve, py::arg("nbytes"), py::arg("timeout") = py::none(),
           "Reserves nbytes contiguous bytes and returns their offset; blocks while the arena is full (RingFull "
           "after `timeout`); RecordTooLarge if nbytes exceeds the capacity.")
      .def("write", &arena_write, py::arg("offset"), py::arg("data"), "Copies data into the arena at offset.")
      .def("read", &arena_read, py::arg("offset"), py::arg("nbytes"), "Copies nbytes at offset out of the arena.")
      .def("view", &arena_view, py::arg("offset"), py::arg("nbytes"),
           "A writable memoryview of the arena bytes (zero-copy into shared memory).")
      .def("release", &arena_release, py::arg("offset"), py::arg("nbytes"),
           "Consumer: returns the oldest chunk (at offset, nbytes long) to the producer.")
      .def_property_readonly("capacity", [](const PyArena& a) { return arena_of(*a.handle->get(), a.part).capacity(); })
      .def_property_readonly("used", [](const PyArena& a) { return arena_of(*a.handle->get(), a.part).used(); })
      .def_property_readonly("name", [](const PyArena& a) { return arena_label(a); })
      .def_property_readonly("is_producer", [](const PyArena& a) {
        return arena_of(*a.handle->get(), a.part).role() == RingRole::kProducer;
      })
      .def("__repr__", [](const PyArena& a) { return "<tally._core.Arena " + arena_label(a) + " of " + a.handle->name + ">"; });

  auto part = [](Part p) {
    return [p](const std::shared_ptr<SegmentHandle>& h) {
      h->get();
      return PartRef{h, p};
    };
  };
  auto ring = [part](Part p) { return [f = part(p)](const std::shared_ptr<SegmentHandle>& h) { return PyRing{f(h)}; }; };
  auto arena = [part](Part p) { return [f = part(p)](const std::shared_ptr<SegmentHandle>& h) { return PyArena{f(h)}; }; };

  py::class_<SegmentHandle, std::shared_ptr<SegmentHandle>>(
      m, "Segment",
      "One client's shared-memory segment: request and completion rings, upload and download arenas. The server "
      "creates it (mode 0600), the client opens it by name.")
      .def_static("create", &segment_create, py::arg("name"), py::arg("request_bytes") = uint64_t{1} << 20,
                  py::arg("completion_bytes") = uint64_t{1} << 18, py::arg("upload_bytes") = uint64_t{64} << 20,
                  py::arg("download_bytes") = uint64_t{64} << 20, py::kw_only(), py::arg("spin_us") = kDefaultSpinUs,
                  py::arg("peer_check_ms") = kDefaultPeerCheckMs,
                  "Server side: creates the segment `name` (e.g. '/tally-<pid>-<n>'); capacities are powers of two.")
      .def_static("open", &segment_open, py::arg("name"), py::kw_only(), py::arg("spin_us") = kDefaultSpinUs,
                  py::arg("peer_check_ms") = kDefaultPeerCheckMs,
                  "Client side: attaches to an existing segment, validates it and records this pid as its client.")
      .def_static("adopt", &segment_adopt, py::arg("fd"), py::arg("name"), py::kw_only(), py::arg("spin_us") = kDefaultSpinUs,
                  py::arg("peer_check_ms") = kDefaultPeerCheckMs,
                  "Server side, for a job migrating from another server on this node: attaches to the segment "
                  "that server created (its shared-memory object `fd`, which stays the caller's) as its server "
                  "end; the client stays attached.")
      .def_property_readonly("shm_fd", [](const SegmentHandle& h) { return h.get()->shm_fd(); },
                             "Server side: the segment's shared-memory object (-1 on the client side).")
      .def_property_readonly("name", [](const SegmentHandle& h) { return h.name; })
      .def_property_readonly("size", [](const SegmentHandle& h) { return h.get()->size(); })
      .def_property_readonly("side", [](const SegmentHandle& h) { return std::string(side_name(h.side)); })
      .def_property_readonly("closed", [](const SegmentHandle& h) { return !h.segment; })
      .def_property_readonly("creator_pid", [](const SegmentHandle& h) { return h.get()->creator_pid(); })
      .def_property_readonly("client_pid", [](const SegmentHandle& h) { return h.get()->client_pid(); })
      .def_property(
          "spin_us", [](const SegmentHandle& h) { return h.get()->policy().spin_ns / 1e3; },
          [](const SegmentHandle& h, double us) {
            h.get()->policy() = make_policy(us, h.get()->policy().peer_check_ns / 1e6);
          },
          "How long a blocked call spins before sleeping on the futex; set it before the rings are in use.")
      .def_property_readonly("request_ring", ring(Part::kRequest))
      .def_property_readonly("completion_ring", ring(Part::kCompletion))
      .def_property_readonly("upload", arena(Part::kUpload))
      .def_property_readonly("download", arena(Part::kDownload))
      .def("peer_alive", [](const SegmentHandle& h) { return h.get()->peer_alive(); },
           "Whether the other side's process exists and has not marked its side closed.")
      .def("watch_peer_socket", [](const SegmentHandle& h, int fd) { h.get()->watch_peer_socket(fd); },
           py::arg("fd"),
           "Judge the peer alive by this connected socket (which must stay open) instead of its pid: "
           "works across pid namespaces.")
      .def("mark_closed", [](const SegmentHandle& h) { h.get()->mark_closed(); },
           "Tells the peer this side is done: its blocked calls fail with PeerDead once drained.")
      .def("mark_evicted", [](const SegmentHandle& h) { h.get()->mark_evicted(); },
           "Tells the client it was evicted (push the Evicted record first): its next request fails at once.")
      .def_property_readonly("evicted", [](const SegmentHandle& h) { return h.get()->evicted(); },
                             "Whether the server marked the client evicted.")
      .def_property_readonly("owner", [](const SegmentHandle& h) { return h.get()->owner(); },
                             "The owner word: which server serves the segment (tally/server/handover.py).")
      .def("owner_exchange",
           [](const SegmentHandle& h, uint64_t expected, uint64_t desired) {
             return h.get()->owner_exchange(expected, desired);
           },
           py::arg("expected"), py::arg("desired"),
           "Compare-and-swap of the owner word across processes: sets `desired` if it holds `expected`; returns "
           "the value it held (equal to `expected` when this call changed it).")
      .def("unlink", [](const SegmentHandle& h) { return h.get()->unlink(); },
           "Removes the segment's name; existing mappings stay usable. False if it was already gone.")
      .def("close", [](SegmentHandle& h) { h.segment.reset(); },
           "Drops this process's mapping (once no call or memoryview uses it). Idempotent.")
      .def("__enter__", [](const std::shared_ptr<SegmentHandle>& h) { return h; })
      .def("__exit__", [](SegmentHandle& h, const py::args&) { h.segment.reset(); })
      .def("__repr__", &segment_repr);
}

tally::ModuleRegistrar registrar("transport", bind_transport);

}  // namespace
}  // namespace tally::transport::python
