// One job's data plane: the session thread's request loop in C++.
//
// The loop waits on the request ring's futex, pops each record and either
// handles it here (the fast path: launches, graph replays, memsets, device and
// inline/arena host copies on a stream the executor has opened to it, synchronizations of a
// job known to be idle, pings) or hands it to the Python handlers (everything
// else), one record after another, so requests take effect in the order the job
// sent them. See docs/data-plane.md for what Python decides and how the two
// planes share order, completion, counters and errors.
//
// Thread model: serve() runs on the session thread without the GIL and takes it
// only to call Python. Python changes the tables below (lanes, functions,
// allocations) from any thread under `mu_`; a fast operation holds `mu_` while
// it checks and issues, so once a lane is revoked no operation of it is still on
// its way to the device. Nothing that holds `mu_` waits for the GIL.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "data_plane/best_effort_gate.h"
#include "data_plane/device_issue.h"
#include "data_plane/owned_ranges.h"
#include "tally/segment.h"

namespace tally::data_plane {

// One of the job's streams as the data plane may use it.
struct Lane {
  bool exists = false;     // the job's stream id names a stream (server/client/streams.py)
  bool allowed = false;    // CUDA's default-stream rules put nothing before the next operation
  bool granted = false;    // the executor would issue the next operation at once (scheduler/fast_lane.py)
  uint32_t sm_cap = 0;     // its launches run on at most this many SMs (0: the whole device)
  bool has_native = false;
  uint64_t native = 0;     // the executor's backend stream for it
  std::atomic<uint64_t> launches{0};       // kernels among them (a graph's, each)
  std::atomic<uint64_t> graph_launches{0}; // graph replays among them, as one unit each
  std::atomic<uint64_t> issued{0};         // operations the data plane issued on it
  std::atomic<int64_t> last_issue_ns{0};   // steady clock
};

// What the data plane did without Python, for the session's status counters.
struct FastCounts {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> sync_requests{0};
  std::atomic<uint64_t> batched{0};   // best-effort kernels issued while the job's earlier ones ran
  std::unordered_map<uint32_t, std::atomic<uint64_t>> by_kind;   // keys fixed at construction
};

// A kernel launch shape the executor's planner settled on running whole for a
// best-effort job (kernel_plan.py): only those may a best-effort lane issue.
struct WholeShape {
  uint64_t function = 0;
  uint32_t grid[3] = {0, 0, 0};
  uint32_t block[3] = {0, 0, 0};
  uint32_t shared_bytes = 0;
  bool operator==(const WholeShape& o) const;
};
struct WholeShapeHash {
  size_t operator()(const WholeShape& s) const;
};

// How far a best-effort job's kernels through the gate may run together: the
// policy's best-effort batches (tally/scheduler/policies/priority.py), applied
// here so that a job of short kernels keeps the device busy without a
// completion round trip through Python per kernel.
struct BatchRule {
  uint32_t max_units = 1;     // 1: one unit at a time
  uint64_t budget_ns = 0;     // the expected device time of a batch, at most
  uint32_t timed_every = 0;   // every this many plane launches of a shape, one goes to Python to be timed (0: never)
  // How long a launch with no room waits for the batch to drain before Python takes
  // it (a unit of Python's may run far longer than a batch).
  int64_t drain_wait_ns = 1'000'000;
};

class ClientPlane {
 public:
  using Fallback = std::function<void(uint32_t kind, uint64_t tag, const uint8_t* payload, uint32_t size)>;

  ClientPlane(std::shared_ptr<transport::Segment> segment, std::shared_ptr<DeviceIssuer> issuer);

  // The request loop: until stop(), poke() or the job is gone. `fallback` runs a
  // request through Python (it takes the GIL itself). Returns whether the loop
  // ended for good (false: poked, Python has something to do on this thread) and
  // why: "" for stop(), else the reason the session closes with.
  struct Ended {
    bool ended;
    std::string reason;
  };
  Ended serve(const Fallback& fallback, double poll_seconds);
  void stop();
  void poke();

  // ---- holding the job's requests (a suspended or migrating job, server/request_hold.py)
  // No request of the job starts once hold() returned true (after waiting up to
  // `timeout_seconds` for the one being handled; false: not held). Records stay in
  // the ring meanwhile.
  bool hold(double timeout_seconds);
  void release();
  bool held() const { return held_.load(std::memory_order_acquire); }
  // Python handling a request outside serve() (records a migration brought): false
  // while held, else the request counts as being handled until leave().
  bool enter();
  void leave() { busy_.store(false, std::memory_order_seq_cst); }

  // ---- what Python tells the data plane -------------------------------------------
  // The fast path as a whole (off once the job's context is unusable); turning it
  // off returns once no fast operation is under way.
  void set_enabled(bool on);
  // Python answered a context-wide synchronization with Done and has nothing of
  // this job pending: until the next request Python handles, a synchronization
  // may be answered here once the device is quiet.
  void set_quiet(bool on) { quiet_.store(on, std::memory_order_release); }

  void stream_rules(uint64_t key, bool exists, bool allowed);   // streams.py
  void open_lane(uint64_t key, uint64_t native);                // fast_lane.py: the executor stream
  void grant(uint64_t key, bool granted, uint32_t sm_cap);      // fast_lane.py (synchronous)
  void revoke_all();
  void close_lane(uint64_t key);                                // the executor stream is going away
  // (kernels launched, operations issued, steady-clock ns of the last) on the lane;
  // kernels are read first, so they never count one the operations do not.
  struct LaneCounts {
    uint64_t launches, issued;
    int64_t last_issue_ns;
    uint64_t graph_launches;
  };
  LaneCounts lane_counts(uint64_t key);
  bool lane_quiet(uint64_t key);                                // issuer's stream_quiet
  // A fast operation on the legacy stream since the last call (streams.py counts
  // legacy work to order blocking streams after it).
  bool take_legacy_touched() { return legacy_touched_.exchange(false, std::memory_order_acq_rel); }

  // The policy's rule for this job's kernels (tally/scheduler/policy.py, LaneRule),
  // applied as declared: they close the server's best-effort gate
  // (best_effort_gate.h) before they go (`closes`); they go only while it is open,
  // only shapes the planner runs whole (`through_gate`); and, through the gate, only
  // when none of the job's earlier kernels still runs (`one_at_a_time`), or, with a
  // batch rule of more than one unit, when the kernels issued since the job's
  // streams were last seen quiet and this one are all of known device time, at most
  // `batch.max_units` of them, expected to take at most `batch.budget_ns` together.
  void set_lane_rule(std::shared_ptr<BestEffortGate> gate, bool closes, bool through_gate, bool one_at_a_time,
                     BatchRule batch);
  void add_whole_shape(const WholeShape& shape);
  // The shape's expected device time (ns), whole or not yet: Python learned it
  // from a timed launch. A shape the plane does not run whole keeps it for later.
  void set_whole_time(const WholeShape& shape, uint64_t expected_ns);

  void add_function(uint64_t id, FunctionEntry entry);
  void remove_function(uint64_t id);
  // A graph the job instantiated (the client's id) whose replays a high-priority
  // lane may launch as one unit; removed before any request that changes it.
  void add_graph(uint64_t id, GraphEntry entry);
  void remove_graph(uint64_t id);
  void add_allocation(uint64_t base, uint64_t size);
  void remove_allocation(uint64_t base);
  void clear_allocations();

  // Pushes a record to the job's completion ring, for Python too (one producer at a
  // time). False once replies are closed (the job is gone).
  bool push_completion(uint32_t kind, uint64_t tag, const uint8_t* payload, uint32_t size);
  void close_replies();
  // The job's session is over: replies are closed and the plane lets go of the
  // segment, so its mapping goes now (once a serve() still running returns), not
  // when Python's garbage collector gets to the session, which reference cycles
  // keep until a full collection: dead jobs' segments stayed mapped, each with the
  // megabytes the server had touched (bench/results/chaos-2026-11-28.md). serve()
  // returns at once after it.
  void close();

  const FastCounts& counts() const { return counts_; }
  DeviceIssuer& issuer() { return *issuer_; }

 private:
  bool try_fast(const transport::RecordView& v);
  bool fast_ping(const transport::RecordView& v);
  bool fast_launch(const transport::RecordView& v);
  bool fast_memset(const transport::RecordView& v);
  bool fast_copy_dtod(const transport::RecordView& v);
  bool fast_copy_htod(const transport::RecordView& v);
  bool fast_graph_launch(const transport::RecordView& v);
  bool fast_synchronize(const transport::RecordView& v);
  Lane* usable_lane(uint64_t key);   // under mu_
  // Whether a launch through the gate may go now (kAlone: nothing of the job's
  // runs; kJoins: it joins the plane's batch on the device), or waits for the
  // batch to drain (kFull), or goes to Python (kRefused).
  enum class Admission { kRefused, kAlone, kJoins, kFull };
  Admission best_effort_admits(const WholeShape& shape);   // under mu_
  void note_issued(uint64_t key, Lane& lane);
  void count(uint32_t kind, uint64_t tag);
  Lane& lane_entry(uint64_t key);    // under mu_

  std::shared_ptr<transport::Segment> segment_;   // under reply_mu_; null once closed
  transport::Segment* serving_ = nullptr;         // serve()'s own reference, for its fast path
  std::shared_ptr<DeviceIssuer> issuer_;
  std::mutex mu_;
  std::map<uint64_t, std::unique_ptr<Lane>> lanes_;
  std::unordered_map<uint64_t, FunctionEntry> functions_;
  std::unordered_map<uint64_t, GraphEntry> graphs_;
  std::shared_ptr<BestEffortGate> gate_;
  bool closes_gate_ = false;
  bool needs_gate_ = false;
  bool one_at_a_time_ = true;
  BatchRule batch_;
  // The batch on the device: what the plane issued through the gate since it last
  // saw the job's streams quiet (expected ns, kernels). An unknown time fills it.
  uint64_t batch_ns_ = 0;
  uint32_t batch_units_ = 0;
  // A launch shape of the job's: whether the planner runs it whole, and its device
  // time as tally/scheduler/whole_durations.py learned it from launches Python timed.
  struct WholeEntry {
    bool whole = false;
    uint64_t expected_ns = 0;   // 0: not known yet; its launches go one at a time
    uint32_t untimed = 0;       // launches the plane issued since Python last timed one
  };
  std::unordered_map<WholeShape, WholeEntry, WholeShapeHash> whole_shapes_;
  OwnedRanges owned_;
  std::atomic<bool> enabled_{true};
  std::atomic<bool> quiet_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> poked_{false};
  std::atomic<bool> held_{false};
  std::atomic<bool> busy_{false};     // a request is being handled (fast or in Python)
  std::mutex hold_mu_;
  std::condition_variable hold_cv_;   // release(), stop(), poke()
  std::atomic<bool> legacy_touched_{false};
  std::mutex reply_mu_;
  bool replies_closed_ = false;
  FastCounts counts_;
};

}  // namespace tally::data_plane
