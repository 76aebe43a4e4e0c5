// The driver version the client reports (cuDriverGetVersion, cuGetProcAddress's
// version check, the integrity check's hash).
#pragma once

namespace tally::client {

// The CUDA version of the headers the entry table was generated from: the newest
// ABI we can hand out. (Once the server reports its driver's version at handshake,
// this becomes the smaller of the two; it must not change after the first call,
// because cudart hashes it into the integrity check.)
int reported_driver_version();

}  // namespace tally::client
