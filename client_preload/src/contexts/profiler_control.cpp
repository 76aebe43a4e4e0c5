// cuProfilerStart/Stop: they bracket what an attached profiler (Nsight Systems,
// nvprof) collects. No profiler can attach to a job's device calls under tally
// (they run in the server), and with none attached the driver accepts both and
// does nothing; so does tally. PyTorch's torch.cuda.profiler calls them.
#include "connection/connection.h"
#include "entry_points/entry_point.h"

using tally::client::Connection;

TALLY_ENTRY(cuProfilerStart_v4000)() { return Connection::instance().usable(); }
TALLY_ENTRY(cuProfilerStop_v4000)() { return Connection::instance().usable(); }
