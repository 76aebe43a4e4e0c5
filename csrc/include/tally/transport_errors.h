// Errors of the shared-memory transport.
//
// Two kinds of outcome, two mechanisms:
//  - expected outcomes of a wait (the deadline passed, the peer went away) are
//    returned as WaitStatus, so the client library's hot path never throws;
//  - violations (a record that can never fit, a corrupt or foreign segment, a
//    failing system call, misuse such as pushing from the consuming side) throw a
//    TransportError subclass whose message says what happened and what to do.
// The Python binding maps each class to an exception of the same name in tally._core.
#pragma once
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tally::transport {

enum class WaitStatus {
  kReady,     // the condition holds (data to pop, space to push)
  kTimedOut,  // the deadline passed first
  kPeerGone,  // the peer process exited or marked its side closed
};

class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bounded wait for space in a ring or arena ran out.
class RingFull : public TransportError {
 public:
  using TransportError::TransportError;
};

// A record or chunk larger than the ring/arena could ever hold.
class RecordTooLarge : public TransportError {
 public:
  using TransportError::TransportError;
};

// The other side of the segment is gone (process exited or closed its side).
class PeerDead : public TransportError {
 public:
  using TransportError::TransportError;
};

// The segment's header, indices or a record are inconsistent.
class CorruptSegment : public TransportError {
 public:
  using TransportError::TransportError;
};

// The segment was written by a build with another wire protocol version.
class ProtocolVersionMismatch : public TransportError {
 public:
  using TransportError::TransportError;
};

// "what: strerror(errno)" for a failed system call.
inline std::string system_error_text(const std::string& what, int err = errno) {
  return what + ": " + std::strerror(err);
}

}  // namespace tally::transport
