// The system's dlopen, behind the one this library exports (dlopen_hook.cpp): what
// tally's own code calls, so its lookups never come back through the hook.
#pragma once

namespace tally::client {

using DlopenFn = void* (*)(const char*, int);

// libc's dlopen, or null when it cannot be found (the hook then fails every call).
DlopenFn system_dlopen();

// The file this library was loaded from (tally's libcuda.so.1), or null.
const char* own_path();

}  // namespace tally::client
