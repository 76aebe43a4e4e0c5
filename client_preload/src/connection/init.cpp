// cuInit: the first call of every CUDA program; it connects to tally-server.
#include "connection/connection.h"
#include "entry_points/entry_point.h"

TALLY_ENTRY(cuInit_v2000)(unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return tally::client::Connection::instance().connect();
}
