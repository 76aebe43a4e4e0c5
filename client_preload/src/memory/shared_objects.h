// POSIX shared-memory objects the job shares with the server: pinned host memory
// (host_memory.cpp) and managed memory (managed_memory.cpp) live in them. Each is
// named /tally-pin-<pid>-<n>, mode 0600; the server removes the name once it has
// opened the object.
#pragma once
#include <cstddef>
#include <string>

namespace tally::client {

size_t page_size();
size_t page_round(size_t bytes);  // up to whole pages

// A new object of `bytes` bytes (a descriptor; its name in *name), or -1, logged.
int create_shared_object(size_t bytes, std::string* name);

// A new object of `bytes` bytes (whole pages) mapped shared and read-write here, and
// not inherited by fork()ed children (they must not write memory the server reads);
// its name in *name. nullptr on failure (no object is left behind then).
void* map_new_shared_object(size_t bytes, std::string* name);

}  // namespace tally::client
