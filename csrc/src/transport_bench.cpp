// tally._core.transport_bench: C++ loops over the transport for benchmarks and
// long correctness runs. The real client is C++, so its per-message cost must be
// measured without the Python interpreter in the loop. Every function releases
// the GIL and runs until done; the peer runs in another process.
//
// Record i produced by produce_records() has tag i and a payload whose size and
// bytes are functions of i (payload_size / fill_payload), so the consumer checks
// every byte without any shared state.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "module_registry.h"
#include "tally/protocol_generated.h"
#include "transport_python.h"

namespace tally::transport::python {
namespace {

constexpr uint32_t kBenchKind = static_cast<uint32_t>(protocol::MessageKind::Notify);
constexpr uint32_t kChunkKind = kBenchKind;  // payload: ChunkRef
constexpr uint32_t kStopKind = static_cast<uint32_t>(protocol::MessageKind::Goodbye);  // ends echo loops

struct ChunkRef {
  uint64_t offset;
  uint64_t length;
};

uint64_t payload_size(uint64_t i, uint64_t min_bytes, uint64_t max_bytes) {
  if (max_bytes <= min_bytes) return min_bytes;
  return min_bytes + (i * 2654435761u) % (max_bytes - min_bytes + 1);
}

// Byte j of record i's payload: the record number first, then a pattern.
void fill_payload(uint64_t i, uint8_t* p, uint64_t n) {
  uint8_t head[8];
  std::memcpy(head, &i, 8);
  for (uint64_t j = 0; j < n; ++j) p[j] = j < 8 ? head[j] : static_cast<uint8_t>(i * 31 + j);
}

bool payload_ok(uint64_t i, const uint8_t* p, uint64_t n) {
  uint8_t head[8];
  std::memcpy(head, &i, 8);
  for (uint64_t j = 0; j < n; ++j)
    if (p[j] != (j < 8 ? head[j] : static_cast<uint8_t>(i * 31 + j))) return false;
  return true;
}

[[noreturn]] void peer_gone(Segment& s, const std::string& what) {
  throw PeerDead(what + " of segment " + s.name() + ": the peer exited or closed its side");
}

void wait_record(Segment& s, RecordRing& ring, RecordView* v, Deadline deadline, uint64_t i) {
  switch (ring.peek(v, deadline)) {
    case WaitStatus::kReady: return;
    case WaitStatus::kTimedOut:
      throw TransportError(ring.name() + ": record " + std::to_string(i) + " did not arrive in time");
    case WaitStatus::kPeerGone: peer_gone(s, "waiting for record " + std::to_string(i));
  }
}

void push_or_throw(Segment& s, RecordRing& ring, uint32_t kind, uint64_t tag, const void* p, uint64_t n) {
  if (ring.try_push(kind, tag, p, n)) return;
  switch (ring.push(kind, tag, p, n, Deadline::never())) {
    case WaitStatus::kReady: return;
    case WaitStatus::kTimedOut: throw TransportError("unreachable: push without deadline timed out");
    case WaitStatus::kPeerGone: peer_gone(s, "push to the " + ring.name());
  }
}

double seconds_between(int64_t t0, int64_t t1) { return static_cast<double>(t1 - t0) * 1e-9; }

// Producer: `count` records, sizes in [min_bytes, max_bytes]. Returns seconds.
double produce_records(const PyRing& r, uint64_t count, uint64_t min_bytes, uint64_t max_bytes) {
  auto s = r.handle->get();
  RecordRing& ring = ring_of(*s, r.part);
  BusyGuard busy(*r.handle, r.part, ring.name());
  py::gil_scoped_release nogil;
  const int64_t t0 = monotonic_ns();
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t n = payload_size(i, min_bytes, max_bytes);
    uint8_t* slot = ring.try_begin(n);
    if (slot == nullptr) {
      switch (ring.begin(n, Deadline::never(), &slot)) {
        case WaitStatus::kReady: break;
        case WaitStatus::kTimedOut: throw TransportError("unreachable: begin without deadline timed out");
        case WaitStatus::kPeerGone: peer_gone(*s, "producing record " + std::to_string(i));
      }
    }
    if (max_bytes == min_bytes && n == 8) {
      std::memcpy(slot, &i, 8);
    } else {
      fill_payload(i, slot, n);
    }
    ring.commit(kBenchKind, i);
  }
  return seconds_between(t0, monotonic_ns());
}

// Consumer of produce_records(): checks order, sizes and (if verify) every byte.
// Returns (seconds from the first record to the last, total payload bytes).
py::tuple consume_records(const PyRing& r, uint64_t count, uint64_t min_bytes, uint64_t max_bytes, bool verify,
                          double timeout) {
  auto s = r.handle->get();
  RecordRing& ring = ring_of(*s, r.part);
  BusyGuard busy(*r.handle, r.part, ring.name());
  uint64_t bytes = 0;
  int64_t t0 = 0, t1 = 0;
  {
    py::gil_scoped_release nogil;
    RecordView v;
    for (uint64_t i = 0; i < count; ++i) {
      if (!ring.try_peek(&v)) wait_record(*s, ring, &v, Deadline::after_seconds(timeout), i);
      if (i == 0) t0 = monotonic_ns();
      const uint64_t want = payload_size(i, min_bytes, max_bytes);
      if (v.tag != i || v.kind != kBenchKind || v.size != want || (verify && !payload_ok(i, v.payload, v.size)))
        throw TransportError("record " + std::to_string(i) + " is wrong: tag " + std::to_string(v.tag) + ", kind " +
                             std::to_string(v.kind) + ", " + std::to_string(v.size) + " bytes (expected " +
                             std::to_string(want) + ")" + (v.tag == i && v.size == want ? ", payload differs" : ""));
      bytes += v.size;
      ring.consume(v);
    }
    t1 = monotonic_ns();
  }
  return py::make_tuple(seconds_between(t0, t1), bytes);
}

// Server side of the round-trip benchmark: answers each request with the same
// record on the other ring until a Goodbye record arrives (not answered) or
// `timeout` seconds pass without a request. Returns the number answered.
uint64_t echo_records(const PyRing& requests, const PyRing& replies, double timeout) {
  auto s = requests.handle->get();
  RecordRing& in = ring_of(*s, requests.part);
  auto s_out = replies.handle->get();
  RecordRing& out = ring_of(*s_out, replies.part);
  BusyGuard busy_in(*requests.handle, requests.part, in.name());
  BusyGuard busy_out(*replies.handle, replies.part, out.name());
  py::gil_scoped_release nogil;
  RecordView v;
  for (uint64_t i = 0;; ++i) {
    if (!in.try_peek(&v)) wait_record(*s, in, &v, Deadline::after_seconds(timeout), i);
    if (v.kind == kStopKind) {
      in.consume(v);
      return i;
    }
    push_or_throw(*s, out, v.kind, v.tag, v.payload, v.size);
    in.consume(v);
  }
}

// Client side: `count` synchronous request/reply pairs; returns each latency in ns.
std::vector<int64_t> round_trips(const PyRing& requests, const PyRing& replies, uint64_t count, uint64_t payload_bytes,
                                 double timeout) {
  auto s = requests.handle->get();
  RecordRing& out = ring_of(*s, requests.part);
  auto s_in = replies.handle->get();
  RecordRing& in = ring_of(*s_in, replies.part);
  BusyGuard busy_out(*requests.handle, requests.part, out.name());
  BusyGuard busy_in(*replies.handle, replies.part, in.name());
  std::vector<int64_t> latencies(count);
  {
    py::gil_scoped_release nogil;
    std::vector<uint8_t> payload(payload_bytes);
    RecordView v;
    for (uint64_t i = 0; i < count; ++i) {
      fill_payload(i, payload.data(), payload.size());
      const int64_t t0 = monotonic_ns();
      push_or_throw(*s, out, kBenchKind, i, payload.data(), payload.size());
      if (!in.try_peek(&v)) wait_record(*s, in, &v, Deadline::after_seconds(timeout), i);
      latencies[i] = monotonic_ns() - t0;
      if (v.tag != i || v.size != payload_bytes) throw TransportError("reply " + std::to_string(i) + " does not match its request");
      in.consume(v);
    }
  }
  return latencies;
}

// Bulk producer: `total_bytes` through the arena in chunks, each named by a
// ChunkRef record on `ring`. Chunk k is filled with byte (k & 0xff). Returns seconds.
double arena_send(const PyArena& a, const PyRing& r, uint64_t total_bytes, uint64_t chunk_bytes) {
  if (chunk_bytes == 0) throw py::value_error("chunk_bytes must be > 0");
  auto s = a.handle->get();
  ByteArena& arena = arena_of(*s, a.part);
  auto s_ring = r.handle->get();
  RecordRing& ring = ring_of(*s_ring, r.part);
  BusyGuard busy_a(*a.handle, a.part, arena.name());
  BusyGuard busy_r(*r.handle, r.part, ring.name());
  py::gil_scoped_release nogil;
  // Sources differ per chunk index mod 4, so the consumer can tell chunks apart.
  std::vector<std::vector<uint8_t>> sources;
  for (int k = 0; k < 4; ++k) sources.emplace_back(chunk_bytes, static_cast<uint8_t>(k + 1));
  const int64_t t0 = monotonic_ns();
  uint64_t sent = 0;
  for (uint64_t k = 0; sent < total_bytes; ++k) {
    const uint64_t n = std::min(chunk_bytes, total_bytes - sent);
    uint64_t offset = 0;
    if (!arena.try_reserve(n, &offset)) {
      switch (arena.reserve(n, Deadline::never(), &offset)) {
        case WaitStatus::kReady: break;
        case WaitStatus::kTimedOut: throw TransportError("unreachable: reserve without deadline timed out");
        case WaitStatus::kPeerGone: peer_gone(*s, "reserving arena space");
      }
    }
    std::memcpy(arena.data() + offset, sources[k % 4].data(), n);
    const ChunkRef ref{offset, n};
    push_or_throw(*s, ring, kChunkKind, k, &ref, sizeof ref);
    sent += n;
  }
  return seconds_between(t0, monotonic_ns());
}

// Bulk consumer of arena_send(): copies each chunk out, checks it (first and last
// byte always, every byte if verify) and releases it. Returns (seconds, bytes).
py::tuple arena_receive(const PyArena& a, const PyRing& r, uint64_t total_bytes, uint64_t chunk_bytes, bool verify,
                        double timeout) {
  auto s = a.handle->get();
  ByteArena& arena = arena_of(*s, a.part);
  auto s_ring = r.handle->get();
  RecordRing& ring = ring_of(*s_ring, r.part);
  BusyGuard busy_a(*a.handle, a.part, arena.name());
  BusyGuard busy_r(*r.handle, r.part, ring.name());
  uint64_t received = 0;
  int64_t t0 = 0, t1 = 0;
  {
    py::gil_scoped_release nogil;
    std::vector<uint8_t> sink(chunk_bytes);
    RecordView v;
    for (uint64_t k = 0; received < total_bytes; ++k) {
      if (!ring.try_peek(&v)) wait_record(*s, ring, &v, Deadline::after_seconds(timeout), k);
      if (k == 0) t0 = monotonic_ns();
      ChunkRef ref;
      if (v.size != sizeof ref || v.tag != k) throw TransportError("chunk record " + std::to_string(k) + " is malformed");
      std::memcpy(&ref, v.payload, sizeof ref);
      if (!arena.contains(ref.offset, ref.length) || ref.length > chunk_bytes)
        throw CorruptSegment("chunk " + std::to_string(k) + " names bytes outside the arena");
      std::memcpy(sink.data(), arena.data() + ref.offset, ref.length);
      const uint8_t want = static_cast<uint8_t>(k % 4 + 1);
      bool ok = ref.length == 0 || (sink[0] == want && sink[ref.length - 1] == want);
      if (verify) ok = ok && std::all_of(sink.begin(), sink.begin() + ref.length, [&](uint8_t b) { return b == want; });
      if (!ok) throw TransportError("chunk " + std::to_string(k) + " arrived damaged");
      arena.release(ref.offset, ref.length);
      ring.consume(v);
      received += ref.length;
    }
    t1 = monotonic_ns();
  }
  return py::make_tuple(seconds_between(t0, t1), received);
}

// Baseline for arena throughput: one thread memcpy-ing the same chunks from one
// source buffer into a destination that cycles through `span_bytes` (the arena's
// size, so the copies touch as much memory as the arena path does). Returns seconds.
double memcpy_baseline(uint64_t total_bytes, uint64_t chunk_bytes, uint64_t span_bytes) {
  if (chunk_bytes == 0 || span_bytes < chunk_bytes) throw py::value_error("need 0 < chunk_bytes <= span_bytes");
  py::gil_scoped_release nogil;
  std::vector<uint8_t> src(chunk_bytes, 1), dst(span_bytes, 0);
  const uint64_t slots = span_bytes / chunk_bytes;
  const int64_t t0 = monotonic_ns();
  uint64_t k = 0;
  for (uint64_t done = 0; done < total_bytes; done += chunk_bytes, ++k) {
    std::memcpy(dst.data() + (k % slots) * chunk_bytes, src.data(), std::min(chunk_bytes, total_bytes - done));
  }
  const int64_t t1 = monotonic_ns();
  if (dst[chunk_bytes / 2] != 1) throw TransportError("memcpy baseline lost its bytes");
  return seconds_between(t0, t1);
}

// ---- unix-socket baseline: the same header + payload over a SOCK_STREAM --------

void write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) throw TransportError(system_error_text("socket send"));
    b += k;
    n -= static_cast<size_t>(k);
  }
}

void read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t k = ::recv(fd, b, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) throw PeerDead("socket peer closed the connection");
    if (k < 0) throw TransportError(system_error_text("socket recv"));
    b += k;
    n -= static_cast<size_t>(k);
  }
}

// Echoes header+payload messages until EOF or a Goodbye header; returns how many.
uint64_t socket_echo(int fd) {
  py::gil_scoped_release nogil;
  std::vector<uint8_t> buf;
  for (uint64_t i = 0;; ++i) {
    protocol::RecordHeader h;
    try {
      read_all(fd, &h, sizeof h);
    } catch (const PeerDead&) {
      return i;
    }
    if (h.kind == kStopKind) return i;
    buf.resize(sizeof h + h.size);
    std::memcpy(buf.data(), &h, sizeof h);
    read_all(fd, buf.data() + sizeof h, h.size);
    write_all(fd, buf.data(), buf.size());
  }
}

// One-way baseline: `count` messages, one send() each, as a client would forward
// asynchronous calls over a socket. Returns seconds.
double socket_send_messages(int fd, uint64_t count, uint64_t payload_bytes) {
  py::gil_scoped_release nogil;
  std::vector<uint8_t> msg(sizeof(protocol::RecordHeader) + payload_bytes);
  const int64_t t0 = monotonic_ns();
  for (uint64_t i = 0; i < count; ++i) {
    const protocol::RecordHeader h{kBenchKind, static_cast<uint32_t>(payload_bytes), i};
    std::memcpy(msg.data(), &h, sizeof h);
    if (payload_bytes >= 8) std::memcpy(msg.data() + sizeof h, &i, 8);
    write_all(fd, msg.data(), msg.size());
  }
  return seconds_between(t0, monotonic_ns());
}

// Reads socket_send_messages()'s stream in large reads, checking the sequence.
// Returns (seconds from the first byte to the last, messages).
py::tuple socket_receive_messages(int fd, uint64_t count, uint64_t payload_bytes) {
  const uint64_t msg_bytes = sizeof(protocol::RecordHeader) + payload_bytes;
  int64_t t0 = 0, t1 = 0;
  {
    py::gil_scoped_release nogil;
    std::vector<uint8_t> buf(msg_bytes * 4096);
    uint64_t have = 0, next = 0;
    while (next < count) {
      const size_t want = std::min<uint64_t>(buf.size() - have, (count - next) * msg_bytes - have);
      const ssize_t k = ::recv(fd, buf.data() + have, want, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k == 0) throw PeerDead("socket peer closed the connection after " + std::to_string(next) + " messages");
      if (k < 0) throw TransportError(system_error_text("socket recv"));
      if (next == 0 && have == 0) t0 = monotonic_ns();
      have += static_cast<uint64_t>(k);
      uint64_t at = 0;
      for (; have - at >= msg_bytes; at += msg_bytes, ++next) {
        protocol::RecordHeader h;
        std::memcpy(&h, buf.data() + at, sizeof h);
        if (h.tag != next) throw TransportError("socket message " + std::to_string(next) + " out of order");
      }
      std::memmove(buf.data(), buf.data() + at, have - at);
      have -= at;
    }
    t1 = monotonic_ns();
  }
  return py::make_tuple(seconds_between(t0, t1), count);
}

std::vector<int64_t> socket_round_trips(int fd, uint64_t count, uint64_t payload_bytes) {
  std::vector<int64_t> latencies(count);
  py::gil_scoped_release nogil;
  std::vector<uint8_t> msg(sizeof(protocol::RecordHeader) + payload_bytes), reply(msg.size());
  for (uint64_t i = 0; i < count; ++i) {
    const protocol::RecordHeader h{kBenchKind, static_cast<uint32_t>(payload_bytes), i};
    std::memcpy(msg.data(), &h, sizeof h);
    fill_payload(i, msg.data() + sizeof h, payload_bytes);
    const int64_t t0 = monotonic_ns();
    write_all(fd, msg.data(), msg.size());
    read_all(fd, reply.data(), reply.size());
    latencies[i] = monotonic_ns() - t0;
    if (std::memcmp(msg.data(), reply.data(), msg.size()) != 0) throw TransportError("socket reply differs from request");
  }
  return latencies;
}

void bind_bench(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "transport_bench", "C++ loops over the transport for benchmarks and long correctness runs (GIL released).");
  m.attr("BENCH_KIND") = kBenchKind;
  m.attr("STOP_KIND") = kStopKind;
  m.def("produce_records", &produce_records, py::arg("ring"), py::arg("count"), py::arg("min_bytes") = 8,
        py::arg("max_bytes") = 8, "Pushes records 0..count-1 (tag i, deterministic payload); returns seconds.");
  m.def("consume_records", &consume_records, py::arg("ring"), py::arg("count"), py::arg("min_bytes") = 8,
        py::arg("max_bytes") = 8, py::arg("verify") = true, py::arg("timeout") = 10.0,
        "Pops and checks produce_records()'s records; returns (seconds first..last, payload bytes).");
  m.def("echo_records", &echo_records, py::arg("requests"), py::arg("replies"), py::arg("timeout") = 60.0,
        "Answers requests with identical records on `replies` until a Goodbye record; returns how many.");
  m.def("round_trips", &round_trips, py::arg("requests"), py::arg("replies"), py::arg("count"),
        py::arg("payload_bytes") = 8, py::arg("timeout") = 10.0,
        "Synchronous request/reply pairs against echo_records(); returns latencies in ns.");
  m.def("arena_send", &arena_send, py::arg("arena"), py::arg("ring"), py::arg("total_bytes"), py::arg("chunk_bytes"),
        "Streams bytes through the arena in chunks named on `ring`; returns seconds.");
  m.def("arena_receive", &arena_receive, py::arg("arena"), py::arg("ring"), py::arg("total_bytes"),
        py::arg("chunk_bytes"), py::arg("verify") = false, py::arg("timeout") = 10.0,
        "Copies arena_send()'s chunks out and releases them; returns (seconds, bytes).");
  m.def("memcpy_baseline", &memcpy_baseline, py::arg("total_bytes"), py::arg("chunk_bytes"), py::arg("span_bytes"),
        "One thread memcpy-ing total_bytes in chunks into a span_bytes destination; returns seconds.");
  m.def("socket_echo", &socket_echo, py::arg("fd"),
        "Echoes header+payload messages on a connected stream socket until EOF or Goodbye; returns how many.");
  m.def("socket_send_messages", &socket_send_messages, py::arg("fd"), py::arg("count"), py::arg("payload_bytes") = 8,
        "Sends `count` header+payload messages, one send() each; returns seconds.");
  m.def("socket_receive_messages", &socket_receive_messages, py::arg("fd"), py::arg("count"),
        py::arg("payload_bytes") = 8, "Receives socket_send_messages()'s stream; returns (seconds, messages).");
  m.def("socket_round_trips", &socket_round_trips, py::arg("fd"), py::arg("count"), py::arg("payload_bytes") = 8,
        "Request/reply pairs over a stream socket against socket_echo(); returns latencies in ns.");
}

tally::ModuleRegistrar registrar("transport_bench", bind_bench);

}  // namespace
}  // namespace tally::transport::python
