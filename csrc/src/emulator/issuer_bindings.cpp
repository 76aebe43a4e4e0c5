// tally._core.data_plane.EmulatorIssuer and LaunchLimits: the emulator's issuer,
// bound beside it so the data plane's own bindings (data_plane/bindings.cpp) know
// only the interface.
#include <algorithm>
#include <array>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "emulator/data_plane_issuer.h"
#include "emulator/memory.h"
#include "emulator/stream_queue.h"
#include "module_registry.h"

namespace py = pybind11;

namespace {

using tally::data_plane::DeviceIssuer;
using tally::data_plane::EmulatorIssuer;
using tally::data_plane::LaunchLimits;

// Named after the data plane's module, so it binds after it (module.cpp binds in name order).
const tally::ModuleRegistrar registrar("data_plane.emulator_issuer", [](py::module_& parent) {
  py::module_ m = parent.attr("data_plane");
  py::class_<LaunchLimits>(m, "LaunchLimits",
                           "What a launch may ask of the emulated device (tally/backends/device_attributes.py).")
      .def(py::init([](std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block, uint32_t threads,
                       uint32_t shared_bytes) {
             LaunchLimits l{};
             std::copy(grid.begin(), grid.end(), l.max_grid);
             std::copy(block.begin(), block.end(), l.max_block);
             l.max_threads = threads;
             l.max_shared_bytes = shared_bytes;
             return l;
           }),
           py::arg("max_grid"), py::arg("max_block"), py::arg("max_threads"), py::arg("max_shared_bytes"));
  py::class_<EmulatorIssuer, DeviceIssuer, std::shared_ptr<EmulatorIssuer>>(
      m, "EmulatorIssuer", "The emulator's: work onto its streams' C++ queues (tally._core.emulator.StreamQueue).")
      .def(py::init<std::shared_ptr<tally::emu::DeviceMemory>, uint32_t, uint64_t, double,
                    std::shared_ptr<tally::emu::CancelFlag>, LaunchLimits>(),
           py::arg("memory"), py::arg("sm_count"), py::arg("max_warp_steps"), py::arg("timeout_seconds"),
           py::arg("cancel"), py::arg("limits"));
});

}  // namespace
