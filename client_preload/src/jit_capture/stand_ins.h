// The JIT compilers' libraries tally stands in front of. A job that dlopens NVRTC or
// nvJitLink and looks their functions up in that handle (cuda-bindings, cuda.core,
// CuPy, PyTorch, numba-cuda) gets from tally's dlopen (entry_points/dlopen_hook.cpp) a
// small library of tally's, client_preload/<library>/, built once per soname the
// library has had: it depends on the real library the job opened and defines only the
// functions whose results tally records (nvrtc_capture.h, nvjitlink_capture.h), so
// every other name is the real library's own.
#pragma once

#include <string>

namespace tally::client {

struct StandIn {
  const char* stem;           // the real library's file name up to its version: "libnvrtc.so"
  const char* const* sonames; // the versions tally has a stand-in for, null-terminated
  const char* stand_in_stem;  // tally's library: "<stand_in_stem><version>" beside the client
};

// Whether the file name in `path` is `stem` ("libnvrtc.so"), with or without versions after it.
bool basename_is(const char* path, const char* stem);

// The path of the loaded library whose file name is `stem` that defines `symbol`: the
// one after this library in the global lookup order (a program linked against it), else
// one loaded privately (a library that depends on it, dlopened without RTLD_GLOBAL:
// PyTorch's libcaffe2_nvrtc); "" when none is loaded.
std::string loaded_library(const char* stem, const char* symbol);

// The function `name` of the library already loaded from `path` (loaded_library's), or
// null; opened with the system's dlopen, never tally's hook, which would hand out a stand-in.
void* symbol_in(const std::string& path, const char* name);

// The stand-in table's entry for the library `filename` (as given to dlopen) names, or null.
const StandIn* stand_in_library(const char* filename);

// The path of tally's library standing in for the real one just opened at `handle`, or
// "" when capture is off or tally has none for that library's soname version.
std::string stand_in_path(const StandIn& library, void* handle);

}  // namespace tally::client
