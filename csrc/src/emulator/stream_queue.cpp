// StreamQueue and NativeOp (stream_queue.h), and their Python bindings in
// tally._core.emulator.
#include "emulator/stream_queue.h"

#include <pybind11/pybind11.h>

#include <chrono>

#include "module_registry.h"

namespace py = pybind11;

namespace tally::emu {

LaunchResult NativeOp::run() {
  DeviceMemory::Use use(*memory);
  switch (kind) {
    case Kind::kLaunch: {
      LaunchConfig c = config;
      c.cancel = cancel ? &cancel->value : nullptr;
      return run_launch(*program, *memory, params, c);
    }
    case Kind::kMemset: memory->fill(dst, value, element_size, count); break;
    case Kind::kCopyHtoD: memory->write(dst, bytes.data(), bytes.size()); break;
    case Kind::kCopyDtoD: memory->copy(dst, src, count); break;
  }
  return LaunchResult{};
}

StreamQueue::~StreamQueue() {
  for (Item& item : items_) Py_XDECREF(static_cast<PyObject*>(item.python));
}

void StreamQueue::push(Item item) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!item.stop) ++pending_;
    items_.push_back(std::move(item));
  }
  ready_.notify_one();
}

StreamQueue::Item StreamQueue::pop() {
  std::unique_lock<std::mutex> lock(mu_);
  ready_.wait(lock, [this] { return !items_.empty(); });
  Item item = std::move(items_.front());
  items_.pop_front();
  return item;
}

void StreamQueue::done() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --pending_;
  }
  drained_.notify_all();
}

bool StreamQueue::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_ == 0;
}

bool StreamQueue::wait_idle(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  auto drained = [this] { return pending_ == 0; };
  if (timeout_seconds < 0) {
    drained_.wait(lock, drained);
    return true;
  }
  return drained_.wait_for(lock, std::chrono::duration<double>(timeout_seconds), drained);
}

bool StreamQueue::quiet() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_ == 0 && !unread_.load(std::memory_order_acquire);
}

namespace {

const ModuleRegistrar registrar("emulator_streams", [](py::module_& parent) {
  py::module_ m = parent.def_submodule("emulator", "The PTX emulator's C++ interpreter (see tally/backends/emulator/).");
  py::class_<NativeOp, std::shared_ptr<NativeOp>>(
      m, "NativeOp", "Work the C++ data plane queued on a stream: run() it on the stream's thread.")
      .def("run", [](NativeOp& op) {
             py::gil_scoped_release nogil;
             return op.run();
           }, "Runs it (GIL released); a launch returns its LaunchResult, a memory operation raises MemoryError.")
      .def_property_readonly("is_launch", [](const NativeOp& op) { return op.kind == NativeOp::Kind::kLaunch; })
      .def_property_readonly("name", [](const NativeOp& op) { return op.program ? op.program->name : std::string(); });

  py::class_<StreamQueue, std::shared_ptr<StreamQueue>>(
      m, "StreamQueue", "One emulator stream's FIFO: Python callables and the data plane's NativeOps, in order.")
      .def(py::init<>())
      .def("push", [](StreamQueue& q, const py::object& fn) {
             StreamQueue::Item item;
             item.python = fn.inc_ref().ptr();
             q.push(std::move(item));
           }, py::arg("fn"), "Queues a callable.")
      .def("push_stop", [](StreamQueue& q) {
             StreamQueue::Item item;
             item.stop = true;
             q.push(std::move(item));
           }, "Queues the mark that ends the stream's thread (after everything before it).")
      .def("pop", [](StreamQueue& q) -> py::object {
             StreamQueue::Item item;
             {
               py::gil_scoped_release nogil;
               item = q.pop();
             }
             if (item.stop) return py::none();
             if (item.native) return py::cast(item.native);
             return py::reinterpret_steal<py::object>(static_cast<PyObject*>(item.python));
           }, "Waits for the next item: a callable, a NativeOp, or None (stop).")
      .def("done", &StreamQueue::done, "The stream's thread finished the item it popped last.")
      .def_property_readonly("idle", &StreamQueue::idle)
      .def("wait_idle", [](StreamQueue& q, const py::object& timeout) {
             const double seconds = timeout.is_none() ? -1.0 : timeout.cast<double>();
             py::gil_scoped_release nogil;
             return q.wait_idle(seconds);
           }, py::arg("timeout") = py::none(), "Until everything queued is done (False after `timeout` seconds).")
      .def("set_unread", &StreamQueue::set_unread, py::arg("unread"),
           "Whether the stream holds an error or printf output the job has not been given yet.")
      .def_property_readonly("quiet", &StreamQueue::quiet)
      .def_property_readonly("handle", [](StreamQueue& q) { return reinterpret_cast<uint64_t>(&q); },
                             "What the C++ data plane names this queue by.");
});

}  // namespace
}  // namespace tally::emu
