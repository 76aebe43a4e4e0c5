// Stream attributes (stream_attributes.cpp): what streams.cpp tells them.
#pragma once
#include <cstdint>

namespace tally::client {

// cuStreamDestroy: the stream's attributes go with it.
void forget_stream_attributes(uint64_t stream);

}  // namespace tally::client
