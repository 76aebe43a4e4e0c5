// The driver version the client reports (cuDriverGetVersion, cuGetProcAddress's
// version check, the integrity check's hash).
#pragma once

namespace tally::client {

// The server's driver version (tally-server --emulate-driver, or its real
// driver's), asked once, before or after cuInit; the version of the headers the
// entry table was generated from when no server answers. It never changes after
// the first call, because cudart hashes it into the integrity check.
int reported_driver_version();

}  // namespace tally::client
