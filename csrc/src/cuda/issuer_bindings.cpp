// tally._core.data_plane.CudaIssuer: the cuda backend's issuer, bound beside it so
// the data plane's own bindings (data_plane/bindings.cpp) know only the interface.
#include <pybind11/pybind11.h>

#include "cuda/data_plane_issuer.h"
#include "module_registry.h"

namespace py = pybind11;

namespace {

using tally::data_plane::CudaIssuer;
using tally::data_plane::DeviceIssuer;

// Named after the data plane's module, so it binds after it (module.cpp binds in name order).
const tally::ModuleRegistrar registrar("data_plane.cuda_issuer", [](py::module_& parent) {
  py::module_ m = parent.attr("data_plane");
  py::class_<CudaIssuer, DeviceIssuer, std::shared_ptr<CudaIssuer>>(
      m, "CudaIssuer", "The CUDA driver's, on the context whose handle (an integer) it is given.")
      .def(py::init<uint64_t>(), py::arg("context"))
      .def("set_context", &CudaIssuer::set_context, py::arg("context"),
           "The context was made again (after a device fault): issue on this one.");
});

}  // namespace
