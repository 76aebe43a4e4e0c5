// The request loop and its fast paths (client_plane.h). A fast path either
// does everything Python's handler would have done for the request (checks,
// issue, answer) or nothing at all, in which case the request goes to Python
// untouched; so every error, and every message saying why, stays Python's.
#include "data_plane/client_plane.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace tally::data_plane {

namespace proto = tally::protocol;
using proto::MessageKind;
using transport::RecordView;

namespace {

constexpr MessageKind kFastKinds[] = {MessageKind::Ping,       MessageKind::LaunchKernel,   MessageKind::Memset,
                                      MessageKind::MemcpyDtoD, MessageKind::MemcpyHtoD,     MessageKind::CtxSynchronize,
                                      MessageKind::StreamSynchronize, MessageKind::GraphLaunch};
// Sizes beyond this are left to Python, whose integers do not overflow.
constexpr uint64_t kMaxExtent = uint64_t{1} << 48;

template <class Msg>
bool read_fixed(const RecordView& v, Msg* out, bool tail_allowed) {
  if (v.size < sizeof(Msg) || (!tail_allowed && v.size != sizeof(Msg))) return false;
  std::memcpy(out, v.payload, sizeof(Msg));
  return true;
}

// How often a best-effort launch with no room in its batch looks whether the batch drained.
constexpr auto kBatchPoll = std::chrono::microseconds(20);

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool WholeShape::operator==(const WholeShape& o) const {
  return function == o.function && shared_bytes == o.shared_bytes &&
         std::memcmp(grid, o.grid, sizeof grid) == 0 && std::memcmp(block, o.block, sizeof block) == 0;
}

size_t WholeShapeHash::operator()(const WholeShape& s) const {
  uint64_t h = s.function * 0x9E3779B97F4A7C15ull;
  for (uint32_t v : {s.grid[0], s.grid[1], s.grid[2], s.block[0], s.block[1], s.block[2], s.shared_bytes})
    h = (h ^ v) * 0x100000001B3ull;
  return static_cast<size_t>(h);
}

ClientPlane::ClientPlane(std::shared_ptr<transport::Segment> segment, std::shared_ptr<DeviceIssuer> issuer)
    : segment_(std::move(segment)), issuer_(std::move(issuer)) {
  for (MessageKind kind : kFastKinds) counts_.by_kind[static_cast<uint32_t>(kind)];
  lane_entry(0).exists = true;   // the legacy default stream always exists
}

ClientPlane::Ended ClientPlane::serve(const Fallback& fallback, double poll_seconds) {
  // Its own reference: close() may drop the plane's while this loop still runs.
  std::shared_ptr<transport::Segment> segment;
  {
    std::lock_guard<std::mutex> lock(reply_mu_);
    segment = segment_;
  }
  if (!segment) return Ended{true, "the session closed"};
  serving_ = segment.get();
  transport::RecordRing& ring = segment->request_ring();
  std::vector<uint8_t> copy;
  const auto poll = std::chrono::duration<double>(poll_seconds);
  try {
    while (!stop_.load(std::memory_order_acquire)) {
      if (poked_.exchange(false, std::memory_order_acq_rel)) return Ended{false, ""};
      if (held_.load(std::memory_order_acquire)) {
        std::unique_lock<std::mutex> lock(hold_mu_);
        hold_cv_.wait_for(lock, poll, [this] {
          return !held_.load() || stop_.load() || poked_.load();
        });
        continue;
      }
      RecordView v;
      const transport::WaitStatus st = ring.peek(&v, transport::Deadline::after_seconds(poll_seconds));
      if (st == transport::WaitStatus::kPeerGone) return Ended{true, "client process died"};
      if (st != transport::WaitStatus::kReady) continue;
      // Busy, then look at the hold (hold() does the reverse): a request never starts
      // once hold() returned, and the record stays in the ring for later.
      busy_.store(true, std::memory_order_seq_cst);
      if (held_.load(std::memory_order_seq_cst)) {
        busy_.store(false, std::memory_order_seq_cst);
        continue;
      }
      struct NotBusy {
        std::atomic<bool>& busy;
        ~NotBusy() { busy.store(false, std::memory_order_seq_cst); }
      } not_busy{busy_};
      if (try_fast(v)) {
        ring.consume(v);
        continue;
      }
      // Python may take long (a module load): free the slot first, as the Python loop does.
      const uint32_t kind = v.kind, size = v.size;
      const uint64_t tag = v.tag;
      copy.assign(v.payload, v.payload + size);
      ring.consume(v);
      quiet_.store(false, std::memory_order_release);
      fallback(kind, tag, copy.data(), size);
    }
  } catch (const transport::TransportError& e) {
    return Ended{true, std::string("transport failure: ") + e.what()};
  }
  return Ended{true, ""};
}

void ClientPlane::stop() {
  stop_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(hold_mu_);
  hold_cv_.notify_all();
}

void ClientPlane::poke() {
  poked_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(hold_mu_);
  hold_cv_.notify_all();
}

bool ClientPlane::hold(double timeout_seconds) {
  held_.store(true, std::memory_order_seq_cst);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (busy_.load(std::memory_order_seq_cst)) {
    if (std::chrono::steady_clock::now() > deadline) {
      release();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void ClientPlane::release() {
  held_.store(false, std::memory_order_seq_cst);
  std::lock_guard<std::mutex> lock(hold_mu_);
  hold_cv_.notify_all();
}

bool ClientPlane::enter() {
  busy_.store(true, std::memory_order_seq_cst);
  if (!held_.load(std::memory_order_seq_cst)) return true;
  busy_.store(false, std::memory_order_seq_cst);
  return false;
}

void ClientPlane::set_enabled(bool on) {
  enabled_.store(on, std::memory_order_release);
  if (!on) std::lock_guard<std::mutex> lock(mu_);   // a fast operation holds mu_ while it issues
}

bool ClientPlane::try_fast(const RecordView& v) {
  if (!enabled_.load(std::memory_order_acquire)) return false;
  switch (static_cast<MessageKind>(v.kind)) {
    case MessageKind::Ping: return fast_ping(v);
    case MessageKind::LaunchKernel: return fast_launch(v);
    case MessageKind::Memset: return fast_memset(v);
    case MessageKind::MemcpyDtoD: return fast_copy_dtod(v);
    case MessageKind::MemcpyHtoD: return fast_copy_htod(v);
    case MessageKind::GraphLaunch: return fast_graph_launch(v);
    case MessageKind::CtxSynchronize:
    case MessageKind::StreamSynchronize: return fast_synchronize(v);
    default: return false;
  }
}

void ClientPlane::count(uint32_t kind, uint64_t tag) {
  counts_.requests.fetch_add(1, std::memory_order_relaxed);
  if (tag) counts_.sync_requests.fetch_add(1, std::memory_order_relaxed);
  counts_.by_kind.at(kind).fetch_add(1, std::memory_order_relaxed);
}

Lane& ClientPlane::lane_entry(uint64_t key) {
  auto& slot = lanes_[key];
  if (!slot) slot = std::make_unique<Lane>();
  return *slot;
}

Lane* ClientPlane::usable_lane(uint64_t key) {
  auto it = lanes_.find(key);
  if (it == lanes_.end()) return nullptr;
  Lane& lane = *it->second;
  return lane.exists && lane.allowed && lane.granted && lane.has_native ? &lane : nullptr;
}

// A kernel through the gate (set_lane_rule): the gate open, a shape the planner
// runs whole, and, when the policy's rule says so, none of the job's earlier
// kernels still running, or room for it in the batch on the device. A batch is
// counted from the moment the plane sees the job's streams quiet: whatever it
// issued since may still be queued, so their expected times add up to at most
// the budget whatever has completed meanwhile, and while there is room the
// plane need not look at the streams (a query of each: on the nested cuda
// backend a round trip to the server below). Work Python issued is not
// counted: a batch ends whenever the executor grants or revokes a lane (Python
// may have issued work meanwhile), and until the streams are seen quiet again
// the plane adds nothing.
ClientPlane::Admission ClientPlane::best_effort_admits(const WholeShape& shape) {
  if (!gate_ || !gate_->is_open()) return Admission::kRefused;
  auto found = whole_shapes_.find(shape);
  if (found == whole_shapes_.end() || !found->second.whole) return Admission::kRefused;
  if (!one_at_a_time_) return Admission::kAlone;
  WholeEntry& entry = found->second;
  // Every so many of the plane's launches of a shape, one goes to Python, which
  // times it (the plane's are not timed): a kernel that got slower behind the
  // same shape is noticed. So do the shape's launches until Python has timed it.
  const bool batches = batch_.max_units > 1;
  const bool to_be_timed =
      batches && (entry.expected_ns == 0 || (batch_.timed_every != 0 && entry.untimed >= batch_.timed_every));
  const bool room = !to_be_timed && batch_units_ != 0 && batch_units_ < batch_.max_units &&
                    batch_ns_ + entry.expected_ns <= batch_.budget_ns;
  bool quiet = !room;
  for (auto it = lanes_.begin(); quiet && it != lanes_.end(); ++it) {
    if (it->second->has_native && !issuer_->stream_quiet(it->second->native)) quiet = false;
  }
  if (!quiet && !batches) return Admission::kRefused;   // Python starts it after the one running
  if (!quiet && !room) return Admission::kFull;   // the batch (or Python's units) must drain first
  if (to_be_timed) {
    // Python times it alone on quiet streams: it starts at once, so its queue stays
    // empty and the lane comes back with the next request (a launch Python must
    // hold makes it take every launch after it until its queue is empty).
    entry.untimed = 0;
    return Admission::kRefused;
  }
  if (quiet) {
    batch_ns_ = 0;
    batch_units_ = 0;
  }
  batch_ns_ += entry.expected_ns;
  ++batch_units_;
  ++entry.untimed;
  return quiet ? Admission::kAlone : Admission::kJoins;
}

void ClientPlane::note_issued(uint64_t key, Lane& lane) {
  lane.last_issue_ns.store(steady_ns(), std::memory_order_relaxed);
  lane.issued.fetch_add(1, std::memory_order_release);
  if (key == 0) legacy_touched_.store(true, std::memory_order_release);
}

// ---- requests ----------------------------------------------------------------------

bool ClientPlane::fast_ping(const RecordView& v) {
  proto::PingMsg m;
  if (v.tag == 0 || !read_fixed(v, &m, false)) return false;
  const proto::PongMsg pong{m.value};
  count(v.kind, v.tag);   // before the answer: a job that got it sees the request counted
  // (when the job is gone nobody is answered, as in Python)
  push_completion(static_cast<uint32_t>(MessageKind::Pong), v.tag, reinterpret_cast<const uint8_t*>(&pong),
                  sizeof pong);
  return true;
}

bool ClientPlane::fast_launch(const RecordView& v) {
  proto::LaunchKernelMsg m;
  if (v.tag != 0 || !read_fixed(v, &m, true)) return false;
  // A cooperative launch goes through Python: the executor runs it whole, with its grid workspace.
  if (m.flags != 0) return false;
  LaunchShape shape{};
  for (int i = 0; i < 3; ++i) {
    if (m.grid[i] == 0 || m.block[i] == 0) return false;
    shape.grid[i] = m.grid[i];
    shape.block[i] = m.block[i];
    shape.cluster[i] = m.cluster[i];   // the issuer checks it as its backend does
  }
  shape.shared_bytes = m.shared_bytes;
  const uint8_t* params = v.payload + sizeof m;
  const uint32_t param_bytes = v.size - static_cast<uint32_t>(sizeof m);
  WholeShape key;
  key.function = m.function;
  std::memcpy(key.grid, shape.grid, sizeof key.grid);
  std::memcpy(key.block, shape.block, sizeof key.block);
  key.shared_bytes = shape.shared_bytes;
  // A best-effort batch with no room: the plane waits (without mu_, so the
  // executor can revoke the lane meanwhile) for the job's streams to drain, up to
  // its rule's drain_wait_ns, rather than hand the launch to Python, whose policy
  // would start it after a completion round trip of its own.
  int64_t give_up_ns = 0;
  std::unique_lock<std::mutex> lock(mu_);
  Lane* lane = nullptr;
  auto fn = functions_.end();
  Admission admitted = Admission::kAlone;
  for (;;) {
    lane = usable_lane(m.stream);
    if (lane == nullptr) return false;
    fn = functions_.find(m.function);
    if (fn == functions_.end() || fn->second.param_bytes != param_bytes) return false;
    if (!needs_gate_) break;
    admitted = best_effort_admits(key);
    if (admitted == Admission::kRefused) return false;
    if (admitted != Admission::kFull) break;
    if (give_up_ns == 0) give_up_ns = steady_ns() + batch_.drain_wait_ns;
    if (steady_ns() >= give_up_ns || stop_.load(std::memory_order_acquire) ||
        poked_.load(std::memory_order_acquire))
      return false;
    lock.unlock();
    std::this_thread::sleep_for(kBatchPoll);
    lock.lock();
  }
  // Before the kernel is on its way: no best-effort lane may start one after this,
  // and the best-effort PTB launches on the device stop after their current tasks.
  if (closes_gate_) {
    gate_->close();
    gate_->preemptible().fire(*issuer_);
  }
  if (!issuer_->launch(lane->native, fn->second, shape, params, param_bytes, lane->sm_cap)) return false;
  lane->launches.fetch_add(1, std::memory_order_release);
  if (admitted == Admission::kJoins) counts_.batched.fetch_add(1, std::memory_order_relaxed);
  note_issued(m.stream, *lane);
  count(v.kind, v.tag);
  return true;
}

// A replay as one unit, as the executor starts a high-priority job's: only on a
// lane of a job whose kernels need no gate (a best-effort job's replays are the
// policy's to run whole or node by node), of a graph Python registered.
bool ClientPlane::fast_graph_launch(const RecordView& v) {
  proto::GraphLaunchMsg m;
  if (v.tag != 0 || !read_fixed(v, &m, false)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (needs_gate_) return false;
  Lane* lane = usable_lane(m.stream);
  if (lane == nullptr) return false;
  auto graph = graphs_.find(m.graph);
  if (graph == graphs_.end()) return false;
  if (closes_gate_) {
    gate_->close();
    gate_->preemptible().fire(*issuer_);
  }
  if (!issuer_->launch_graph(lane->native, graph->second, lane->sm_cap)) return false;
  lane->launches.fetch_add(graph->second.kernels, std::memory_order_release);
  lane->graph_launches.fetch_add(1, std::memory_order_release);
  note_issued(m.stream, *lane);
  count(v.kind, v.tag);
  return true;
}

bool ClientPlane::fast_memset(const RecordView& v) {
  proto::MemsetMsg m;
  if (v.tag != 0 || !read_fixed(v, &m, false)) return false;
  const uint32_t elem = m.element_size;
  if (elem != 1 && elem != 2 && elem != 4) return false;
  if (elem < 4 && m.value >= (uint32_t{1} << (8 * elem))) return false;
  if (m.width == 0 || m.height == 0) {   // Python queues nothing for it either
    count(v.kind, v.tag);
    return true;
  }
  if (m.width > kMaxExtent || m.height > kMaxExtent) return false;
  const uint64_t row = m.width * elem;
  if (m.height > 1 && m.pitch != row) return false;   // rows apart (or a bad pitch): Python's
  uint64_t elements = 0, bytes = 0;
  if (__builtin_mul_overflow(m.width, m.height, &elements) || __builtin_mul_overflow(elements, elem, &bytes))
    return false;
  std::lock_guard<std::mutex> lock(mu_);
  Lane* lane = usable_lane(m.stream);
  if (lane == nullptr || !owned_.contains(m.dst, bytes)) return false;
  if (!issuer_->memset(lane->native, m.dst, m.value, elem, elements)) return false;
  note_issued(m.stream, *lane);
  count(v.kind, v.tag);
  return true;
}

bool ClientPlane::fast_copy_dtod(const RecordView& v) {
  proto::MemcpyDtoDMsg m;
  if (v.tag != 0 || !read_fixed(v, &m, false)) return false;
  if (m.width == 0 || m.height == 0 || m.width > kMaxExtent || m.height > kMaxExtent) return false;
  if (m.height > 1 && (m.dst_pitch != m.width || m.src_pitch != m.width)) return false;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(m.width, m.height, &bytes)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  Lane* lane = usable_lane(m.stream);
  if (lane == nullptr || !owned_.contains(m.dst, bytes) || !owned_.contains(m.src, bytes)) return false;
  if (!issuer_->copy_dtod(lane->native, m.dst, m.src, bytes)) return false;
  note_issued(m.stream, *lane);
  count(v.kind, v.tag);
  return true;
}

bool ClientPlane::fast_copy_htod(const RecordView& v) {
  proto::MemcpyHtoDMsg m;
  if (!read_fixed(v, &m, true)) return false;
  const auto source = static_cast<proto::CopySource>(m.source);
  if (source != proto::CopySource::INLINE && source != proto::CopySource::ARENA) return false;
  if (m.width == 0 || m.height == 0 || m.width > kMaxExtent || m.height > kMaxExtent) return false;
  if (m.height > 1 && m.dst_pitch != m.width) return false;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(m.width, m.height, &bytes)) return false;
  const uint8_t* src = v.payload + sizeof m;
  transport::ByteArena& upload = serving_->upload();
  if (source == proto::CopySource::INLINE) {
    if (v.size - sizeof m != bytes) return false;
  } else if (!upload.contains(m.arena_offset, bytes)) {
    return false;
  } else {
    src = upload.data() + m.arena_offset;
  }
  std::unique_lock<std::mutex> lock(mu_);
  Lane* lane = usable_lane(m.stream);
  if (lane == nullptr || !owned_.contains(m.dst, bytes)) return false;
  if (source == proto::CopySource::ARENA) {
    // The chunk must be released in order before anything else of the job's is;
    // if its release is refused (a confused client) Python reports it, the same way.
    try {
      if (!issuer_->copy_htod(lane->native, m.dst, src, bytes)) return false;
      upload.release(m.arena_offset, bytes);
    } catch (const transport::TransportError&) {
      return false;
    }
  } else if (!issuer_->copy_htod(lane->native, m.dst, src, bytes)) {
    return false;
  }
  note_issued(m.stream, *lane);
  lock.unlock();   // a job slow to drain its completion ring holds up no grant
  count(v.kind, v.tag);
  if (v.tag) push_completion(static_cast<uint32_t>(MessageKind::Done), v.tag, nullptr, 0);
  return true;
}

bool ClientPlane::fast_synchronize(const RecordView& v) {
  if (v.tag == 0 || !quiet_.load(std::memory_order_acquire)) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<MessageKind>(v.kind) == MessageKind::StreamSynchronize) {
      proto::StreamSynchronizeMsg m;
      if (!read_fixed(v, &m, false)) return false;
      auto it = lanes_.find(m.stream);
      if (it == lanes_.end() || !it->second->exists) return false;
    } else if (v.size != 0) {
      return false;
    }
    // Python found every stream of the job idle when it last answered; since then only
    // the fast path issued work, on its lanes: they are all there is to look at.
    for (auto& [key, lane] : lanes_) {
      if (!lane->has_native) continue;
      if (lane->issued.load(std::memory_order_acquire) == 0) continue;
      if (!issuer_->stream_quiet(lane->native)) return false;
    }
  }
  count(v.kind, v.tag);
  // Outside the tables' lock: a job slow to drain its completion ring holds up no grant.
  push_completion(static_cast<uint32_t>(MessageKind::Done), v.tag, nullptr, 0);
  return true;
}

// ---- tables ------------------------------------------------------------------------

void ClientPlane::stream_rules(uint64_t key, bool exists, bool allowed) {
  std::lock_guard<std::mutex> lock(mu_);
  Lane& lane = lane_entry(key);
  lane.exists = exists;
  lane.allowed = exists && allowed;
}

void ClientPlane::open_lane(uint64_t key, uint64_t native) {
  std::lock_guard<std::mutex> lock(mu_);
  Lane& lane = lane_entry(key);
  lane.native = native;
  lane.has_native = true;
}

void ClientPlane::grant(uint64_t key, bool granted, uint32_t sm_cap) {
  std::lock_guard<std::mutex> lock(mu_);
  Lane& lane = lane_entry(key);
  lane.granted = granted;
  lane.sm_cap = sm_cap;
  batch_units_ = 0;   // Python may have issued work: the next batch starts once the streams are quiet
}

void ClientPlane::revoke_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, lane] : lanes_) lane->granted = false;
  batch_units_ = 0;
}

void ClientPlane::close_lane(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = lanes_.find(key);
  if (it == lanes_.end()) return;
  Lane& lane = *it->second;
  lane.granted = false;
  lane.has_native = false;
  lane.native = 0;
  lane.launches.store(0, std::memory_order_relaxed);
  lane.graph_launches.store(0, std::memory_order_relaxed);
  lane.issued.store(0, std::memory_order_relaxed);
}

ClientPlane::LaneCounts ClientPlane::lane_counts(uint64_t key) {
  auto it = lanes_.end();
  {
    std::lock_guard<std::mutex> lock(mu_);
    it = lanes_.find(key);
    if (it == lanes_.end()) return LaneCounts{0, 0, 0, 0};
  }
  // Lanes are never erased, only reset, so the entry outlives the lock.
  const Lane& lane = *it->second;
  const uint64_t graph_launches = lane.graph_launches.load(std::memory_order_acquire);
  const uint64_t launches = lane.launches.load(std::memory_order_acquire);
  return LaneCounts{launches, lane.issued.load(std::memory_order_acquire),
                    lane.last_issue_ns.load(std::memory_order_relaxed), graph_launches};
}

bool ClientPlane::lane_quiet(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = lanes_.find(key);
  if (it == lanes_.end() || !it->second->has_native) return true;
  return issuer_->stream_quiet(it->second->native);
}

void ClientPlane::set_lane_rule(std::shared_ptr<BestEffortGate> gate, bool closes, bool through_gate,
                                bool one_at_a_time, BatchRule batch) {
  std::lock_guard<std::mutex> lock(mu_);
  gate_ = std::move(gate);
  closes_gate_ = gate_ && closes;
  needs_gate_ = through_gate;     // without a gate such a job's lanes issue no kernel
  one_at_a_time_ = one_at_a_time;
  batch_ = batch;
  if (batch_.max_units == 0) batch_.max_units = 1;
}

void ClientPlane::add_whole_shape(const WholeShape& shape) {
  std::lock_guard<std::mutex> lock(mu_);
  whole_shapes_[shape].whole = true;
}

void ClientPlane::set_whole_time(const WholeShape& shape, uint64_t expected_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  whole_shapes_[shape].expected_ns = expected_ns;
}

void ClientPlane::add_function(uint64_t id, FunctionEntry entry) {
  std::lock_guard<std::mutex> lock(mu_);
  functions_[id] = std::move(entry);
}

void ClientPlane::remove_function(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  functions_.erase(id);
  for (auto it = whole_shapes_.begin(); it != whole_shapes_.end();) {
    it = it->first.function == id ? whole_shapes_.erase(it) : std::next(it);
  }
}

void ClientPlane::add_graph(uint64_t id, GraphEntry entry) {
  std::lock_guard<std::mutex> lock(mu_);
  graphs_[id] = entry;
}

void ClientPlane::remove_graph(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  graphs_.erase(id);
}

void ClientPlane::add_allocation(uint64_t base, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  owned_.add(base, size);
}

void ClientPlane::remove_allocation(uint64_t base) {
  std::lock_guard<std::mutex> lock(mu_);
  owned_.remove(base);
}

void ClientPlane::clear_allocations() {
  std::lock_guard<std::mutex> lock(mu_);
  owned_.clear();
}

// ---- replies -----------------------------------------------------------------------

bool ClientPlane::push_completion(uint32_t kind, uint64_t tag, const uint8_t* payload, uint32_t size) {
  std::lock_guard<std::mutex> lock(reply_mu_);
  if (replies_closed_) return false;
  const transport::WaitStatus st =
      segment_->completion_ring().push(kind, tag, payload, size, transport::Deadline::never());
  return st == transport::WaitStatus::kReady;
}

void ClientPlane::close_replies() {
  std::lock_guard<std::mutex> lock(reply_mu_);
  replies_closed_ = true;
}

void ClientPlane::close() {
  std::shared_ptr<transport::Segment> dropped;
  {
    std::lock_guard<std::mutex> lock(reply_mu_);   // no push is under way, none starts after
    replies_closed_ = true;
    dropped = std::move(segment_);
  }
  stop();
}

}  // namespace tally::data_plane
