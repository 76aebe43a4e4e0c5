// Lets each binding file add itself to tally._core without editing module.cpp:
//   static tally::ModuleRegistrar reg("transport", [](pybind11::module_& m) {...});
#pragma once
#include <pybind11/pybind11.h>

#include <functional>
#include <utility>
#include <vector>

namespace tally {

using BindFn = std::function<void(pybind11::module_&)>;

inline std::vector<std::pair<const char*, BindFn>>& module_bindings() {
  static std::vector<std::pair<const char*, BindFn>> bindings;
  return bindings;
}

struct ModuleRegistrar {
  ModuleRegistrar(const char* name, BindFn fn) { module_bindings().emplace_back(name, std::move(fn)); }
};

}  // namespace tally
