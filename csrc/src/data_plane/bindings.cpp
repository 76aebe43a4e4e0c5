// tally._core.data_plane: the C++ data plane's Python face. The session
// (tally/server/data_plane.py) makes a ClientPlane per job and runs its loop;
// the executor's fast lanes (tally/scheduler/fast_lane.py) open and revoke its
// lanes; the backends hand it their issuer.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "data_plane/client_plane.h"
#include "data_plane/device_issue.h"
#include "emulator/program.h"
#include "module_registry.h"
#include "transport_python.h"

namespace py = pybind11;

namespace tally::data_plane {
namespace {

using transport::python::BusyGuard;
using transport::python::ContiguousBytes;
using transport::python::Part;
using transport::python::SegmentHandle;

// The plane and the Python Segment it serves (whose request ring it owns while serving).
struct PyClientPlane {
  std::shared_ptr<SegmentHandle> segment;
  std::shared_ptr<ClientPlane> plane;
};

PyClientPlane make_plane(const std::shared_ptr<SegmentHandle>& segment, std::shared_ptr<DeviceIssuer> issuer) {
  if (!issuer) throw py::value_error("a ClientPlane needs the backend's issuer");
  return PyClientPlane{segment, std::make_shared<ClientPlane>(segment->get(), std::move(issuer))};
}

py::tuple serve(PyClientPlane& p, const py::function& handle, double poll_seconds) {
  if (!(poll_seconds > 0)) throw py::value_error("poll_seconds must be > 0");
  BusyGuard busy(*p.segment, Part::kRequest, "request ring");
  auto plane = p.plane;
  const ClientPlane::Fallback fallback = [&handle](uint32_t kind, uint64_t tag, const uint8_t* payload,
                                                   uint32_t size) {
    py::gil_scoped_acquire gil;
    handle(kind, tag, py::bytes(reinterpret_cast<const char*>(payload), size));
  };
  ClientPlane::Ended ended;
  {
    py::gil_scoped_release nogil;
    ended = plane->serve(fallback, poll_seconds);
  }
  return py::make_tuple(ended.ended, ended.reason);
}

bool push_completion(PyClientPlane& p, uint32_t kind, uint64_t tag, const py::buffer& payload) {
  const ContiguousBytes data(payload);
  if (data.size() > UINT32_MAX) throw py::value_error("a completion record's payload must be under 4 GiB");
  auto plane = p.plane;
  py::gil_scoped_release nogil;   // the job may have to drain its completion ring first
  return plane->push_completion(kind, tag, static_cast<const uint8_t*>(data.data()),
                                static_cast<uint32_t>(data.size()));
}

WholeShape whole_shape(uint64_t function_id, const std::tuple<uint32_t, uint32_t, uint32_t>& grid,
                       const std::tuple<uint32_t, uint32_t, uint32_t>& block, uint32_t shared_bytes) {
  WholeShape s;
  s.function = function_id;
  s.grid[0] = std::get<0>(grid), s.grid[1] = std::get<1>(grid), s.grid[2] = std::get<2>(grid);
  s.block[0] = std::get<0>(block), s.block[1] = std::get<1>(block), s.block[2] = std::get<2>(block);
  s.shared_bytes = shared_bytes;
  return s;
}

py::tuple counts(const PyClientPlane& p) {
  const FastCounts& c = p.plane->counts();
  py::dict by_kind;
  for (const auto& [kind, n] : c.by_kind) {
    const uint64_t value = n.load(std::memory_order_relaxed);
    if (value) by_kind[py::int_(kind)] = value;
  }
  return py::make_tuple(c.requests.load(std::memory_order_relaxed), c.sync_requests.load(std::memory_order_relaxed),
                        by_kind);
}

void bind_data_plane(py::module_& parent) {
  py::module_ m = parent.def_submodule("data_plane", "the C++ data plane (docs/data-plane.md)");

  py::class_<DeviceIssuer, std::shared_ptr<DeviceIssuer>>(m, "Issuer",
                                                          "How a backend's work reaches its device from C++.")
      .def_property_readonly("name", &DeviceIssuer::name)
      .def_property_readonly("completes_at_issue", &DeviceIssuer::completes_at_issue)
      .def_property_readonly("carries_sm_cap", &DeviceIssuer::carries_sm_cap)
      .def("stream_quiet", &DeviceIssuer::stream_quiet, py::arg("stream"),
           "Whether the backend stream (its native handle) finished everything issued to it.");
  py::class_<NullIssuer, DeviceIssuer, std::shared_ptr<NullIssuer>>(m, "NullIssuer", "The null device's.")
      .def(py::init<>());

  py::class_<BestEffortGate, std::shared_ptr<BestEffortGate>>(
      m, "BestEffortGate", "The server's switch for best-effort lanes' kernels (best_effort_gate.h).")
      .def(py::init<>())
      .def("open", &BestEffortGate::open)
      .def("close", &BestEffortGate::close)
      .def_property_readonly("is_open", &BestEffortGate::is_open)
      .def("pin_preemptible", [](BestEffortGate& g, uint64_t flag_address, uint64_t control_stream) {
             g.preemptible().pin(flag_address, control_stream);
           }, py::arg("flag_address"), py::arg("control_stream"),
           "A PTB launch a high-priority kernel issued by a C++ plane stops (preempt_board.h): its flag's "
           "device address and the native handle of the stream the flag is written on.")
      .def("unpin_preemptible", [](BestEffortGate& g, uint64_t flag_address) {
             return g.preemptible().unpin(flag_address);
           }, py::arg("flag_address"), "Off the board; True when a high-priority kernel set its flag meanwhile.")
      .def_property_readonly("preemptions_fired", [](BestEffortGate& g) { return g.preemptible().fires(); });

  py::class_<PyClientPlane>(m, "ClientPlane",
                            "One job's request loop in C++, with the fast path for what the executor lets through.")
      .def(py::init(&make_plane), py::arg("segment"), py::arg("issuer"))
      .def("serve", &serve, py::arg("handle"), py::arg("poll_seconds"),
           "Runs the request loop on this thread (without the GIL) until stop(), poke() or the job is "
           "gone; handle(kind, tag, payload) runs a request in Python. Returns (ended, why): ended is False "
           "after poke(); why is '' after stop().")
      .def("stop", [](PyClientPlane& p) { p.plane->stop(); })
      .def("poke", [](PyClientPlane& p) { p.plane->poke(); }, "Make serve() return to its caller for a moment.")
      .def("hold", [](PyClientPlane& p, double timeout) {
             py::gil_scoped_release nogil;   // the request being handled may need the GIL to finish
             return p.plane->hold(timeout);
           }, py::arg("timeout"),
           "No request starts from now on; waits up to timeout s for the one being handled (False: not held).")
      .def("release", [](PyClientPlane& p) { p.plane->release(); })
      .def_property_readonly("held", [](PyClientPlane& p) { return p.plane->held(); })
      .def("enter", [](PyClientPlane& p) { return p.plane->enter(); },
           "Python is about to handle a request itself: False while held.")
      .def("leave", [](PyClientPlane& p) { p.plane->leave(); })
      .def("set_enabled", [](PyClientPlane& p, bool on) {
             py::gil_scoped_release nogil;   // turning off waits for a fast operation under way
             p.plane->set_enabled(on);
           }, py::arg("on"))
      .def("set_quiet", [](PyClientPlane& p, bool on) { p.plane->set_quiet(on); }, py::arg("on"))
      .def("stream_rules", [](PyClientPlane& p, uint64_t key, bool exists, bool allowed) {
             p.plane->stream_rules(key, exists, allowed);
           }, py::arg("key"), py::arg("exists"), py::arg("allowed"))
      .def("open_lane", [](PyClientPlane& p, uint64_t key, uint64_t native) { p.plane->open_lane(key, native); },
           py::arg("key"), py::arg("native"))
      .def("grant", [](PyClientPlane& p, uint64_t key, bool granted, uint32_t sm_cap) {
             py::gil_scoped_release nogil;   // waits for a fast operation in progress
             p.plane->grant(key, granted, sm_cap);
           }, py::arg("key"), py::arg("granted"), py::arg("sm_cap") = 0,
           "Grant or revoke the lane; its launches run on at most sm_cap SMs (0: all).")
      .def("revoke_all", [](PyClientPlane& p) {
             py::gil_scoped_release nogil;
             p.plane->revoke_all();
           })
      .def("close_lane", [](PyClientPlane& p, uint64_t key) {
             py::gil_scoped_release nogil;
             p.plane->close_lane(key);
           }, py::arg("key"))
      .def("lane_counts", [](PyClientPlane& p, uint64_t key) {
             const ClientPlane::LaneCounts c = p.plane->lane_counts(key);
             return py::make_tuple(c.launches, c.issued, c.last_issue_ns, c.graph_launches);
           }, py::arg("key"), "(kernels launched, operations issued, steady-clock ns of the last, graph replays "
                              "launched as one unit) on the lane")
      .def("lane_quiet", [](PyClientPlane& p, uint64_t key) {
             py::gil_scoped_release nogil;
             return p.plane->lane_quiet(key);
           }, py::arg("key"))
      .def("take_legacy_touched", [](PyClientPlane& p) { return p.plane->take_legacy_touched(); })
      .def("add_function", [](PyClientPlane& p, uint64_t id, uint32_t param_bytes, uint64_t native) {
             FunctionEntry e;
             e.param_bytes = param_bytes;
             e.native = native;
             p.plane->add_function(id, std::move(e));
           }, py::arg("function_id"), py::arg("param_bytes"), py::arg("native") = 0)
      .def("add_emulator_function", [](PyClientPlane& p, uint64_t id, uint32_t param_bytes,
                                       std::shared_ptr<emu::Program> program, uint32_t max_threads,
                                       std::tuple<uint32_t, uint32_t, uint32_t> required_block,
                                       uint32_t static_shared_bytes,
                                       std::tuple<uint32_t, uint32_t, uint32_t> required_cluster,
                                       bool explicit_cluster) {
             FunctionEntry e;
             e.param_bytes = param_bytes;
             e.object = std::move(program);
             e.max_threads = max_threads;
             e.required_block[0] = std::get<0>(required_block);
             e.required_block[1] = std::get<1>(required_block);
             e.required_block[2] = std::get<2>(required_block);
             e.static_shared_bytes = static_shared_bytes;
             e.required_cluster[0] = std::get<0>(required_cluster);
             e.required_cluster[1] = std::get<1>(required_cluster);
             e.required_cluster[2] = std::get<2>(required_cluster);
             e.explicit_cluster = explicit_cluster;
             p.plane->add_function(id, std::move(e));
           }, py::arg("function_id"), py::arg("param_bytes"), py::arg("program"), py::arg("max_threads"),
           py::arg("required_block"), py::arg("static_shared_bytes"),
           py::arg("required_cluster") = std::make_tuple(0u, 0u, 0u), py::arg("explicit_cluster") = false,
           "A lowered emulator kernel and the launch limits the backend checks (0: none), its "
           "compile-time cluster shape included.")
      .def("set_lane_rule", [](PyClientPlane& p, std::shared_ptr<BestEffortGate> gate, bool closes,
                               bool through_gate, bool one_at_a_time, uint32_t max_batch, uint64_t batch_budget_ns,
                               uint32_t timed_every, int64_t drain_wait_ns) {
             BatchRule batch;
             batch.max_units = max_batch;
             batch.budget_ns = batch_budget_ns;
             batch.timed_every = timed_every;
             batch.drain_wait_ns = drain_wait_ns;
             p.plane->set_lane_rule(std::move(gate), closes, through_gate, one_at_a_time, batch);
           }, py::arg("gate"), py::arg("closes"), py::arg("through_gate"), py::arg("one_at_a_time"),
           py::arg("max_batch") = 1, py::arg("batch_budget_ns") = 0, py::arg("timed_every") = 0,
           py::arg("drain_wait_ns") = BatchRule{}.drain_wait_ns,
           "The policy's LaneRule for the job's kernels (tally/scheduler/policy.py), as declared, with "
           "the executor's batch budget, how often a shape's launch goes to Python to be timed, and how "
           "long a launch waits for a full batch to drain before Python takes it.")
      .def("add_whole_shape", [](PyClientPlane& p, uint64_t function_id, std::tuple<uint32_t, uint32_t, uint32_t> grid,
                                 std::tuple<uint32_t, uint32_t, uint32_t> block, uint32_t shared_bytes) {
             p.plane->add_whole_shape(whole_shape(function_id, grid, block, shared_bytes));
           }, py::arg("function_id"), py::arg("grid"), py::arg("block"), py::arg("shared_bytes"),
           "A launch shape of a best-effort job's kernel that the planner runs whole.")
      .def("set_whole_time", [](PyClientPlane& p, uint64_t function_id, std::tuple<uint32_t, uint32_t, uint32_t> grid,
                                std::tuple<uint32_t, uint32_t, uint32_t> block, uint32_t shared_bytes,
                                uint64_t expected_ns) {
             p.plane->set_whole_time(whole_shape(function_id, grid, block, shared_bytes), expected_ns);
           }, py::arg("function_id"), py::arg("grid"), py::arg("block"), py::arg("shared_bytes"),
           py::arg("expected_ns"), "A launch shape's expected device time, learned from a timed launch.")
      .def("batched", [](const PyClientPlane& p) { return p.plane->counts().batched.load(std::memory_order_relaxed); },
           "Best-effort kernels the plane issued while the job's earlier ones still ran (its batches).")
      .def("remove_function", [](PyClientPlane& p, uint64_t id) { p.plane->remove_function(id); },
           py::arg("function_id"))
      .def("add_graph", [](PyClientPlane& p, uint64_t id, uint64_t native, uint32_t kernels) {
             GraphEntry e;
             e.native = native;
             e.kernels = kernels;
             p.plane->add_graph(id, e);
           }, py::arg("graph_id"), py::arg("native"), py::arg("kernels"),
           "A graph the job's replays may launch as one unit: the backend's executable (a CUgraphExec, 0 "
           "for the null device) and its kernel count.")
      .def("remove_graph", [](PyClientPlane& p, uint64_t id) { p.plane->remove_graph(id); }, py::arg("graph_id"))
      .def("add_allocation", [](PyClientPlane& p, uint64_t base, uint64_t size) {
             p.plane->add_allocation(base, size);
           }, py::arg("base"), py::arg("size"))
      .def("remove_allocation", [](PyClientPlane& p, uint64_t base) { p.plane->remove_allocation(base); },
           py::arg("base"))
      .def("clear_allocations", [](PyClientPlane& p) { p.plane->clear_allocations(); })
      .def("push_completion", &push_completion, py::arg("kind"), py::arg("tag"), py::arg("payload"),
           "Pushes a record to the job's completion ring (waiting for room); False once replies are closed.")
      .def("close_replies", [](PyClientPlane& p) {
             py::gil_scoped_release nogil;   // a push in progress finishes first
             p.plane->close_replies();
           })
      .def("close", [](PyClientPlane& p) {
             py::gil_scoped_release nogil;   // a push in progress finishes first
             p.plane->close();
           },
           "The job's session is over: replies closed, the loop stopped, and the plane's reference to the "
           "segment dropped (its mapping goes with the Segment's own close()). Idempotent.")
      .def("counts", &counts, "(requests, sync_requests, {kind: n}) the fast path handled.")
      .def_property_readonly("issuer", [](PyClientPlane& p) {
        return std::shared_ptr<DeviceIssuer>(p.plane, &p.plane->issuer());
      });
}

tally::ModuleRegistrar registrar("data_plane", bind_data_plane);

}  // namespace
}  // namespace tally::data_plane
